"""The documentation is usable from a clone of this repository alone.

Checks every file of the repository (Markdown, Python, BUILD, shell, ...):
every relative link in a Markdown file resolves to a file of the repository
(and, for a link into a Markdown file with a `#fragment`, to one of its
headings); no file refers to a path outside the repository or cites a
document that only the project's authors have (the implementation notes the
code was written from); no Markdown file names one of the project's
issue-tracker numbers. Each failure lists every offending `path:line`.

The test reads the source tree itself, found through this file's real path
(under Bazel, the runfiles are links into it), so it sees files in every
Bazel package; it is tagged `external` in tests/BUILD so Bazel never serves
it from the cache.
"""

import collections
import io
import os
import re
import subprocess
import tokenize
from typing import Iterable, Iterator, Optional
import unicodedata
import urllib.parse

from absl.testing import absltest

# The repository: this file is <root>/tests/integration/docs_test.py.
ROOT = os.path.dirname(
  os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
)
_THIS_FILE = os.path.relpath(os.path.realpath(__file__), ROOT)

# Files checked: text files the repository's users read or run.
_TEXT_EXTENSIONS = frozenset(
  [
    '.md',
    '.py',
    '.sh',
    '.bzl',
    '.toml',
    '.txt',
    '.cfg',
    '.ini',
    '.yaml',
    '.yml',
    '.bib',
    '.cff',
  ]
)
_TEXT_NAMES = frozenset(
  [
    'BUILD',
    'WORKSPACE',
    'Makefile',
    '.bazelrc',
    '.gitignore',
    'LICENSE',
  ]
)
# Never descended into when git is not available to list the files.
_SKIPPED_DIRS = frozenset(['.git', '.venv', '__pycache__', 'runs', 'build'])

# A path outside the repository: the sibling directory the project's authors
# keep their working notes in, or any absolute path into it.
_OUTSIDE_PATTERNS = (
  re.compile(r'(?:\.\./)+shared\b'),
  re.compile(r'/work/shared\b'),
  re.compile(r'\bshared/(?:specs|notes|papers)\b'),
)
_METHODS = r'(?:fedcda|fedglad|fedlaw|fedlws|fedsa)'
# Citations of the authors' implementation notes, which users do not have:
# their section numbers, their file names, possessive references to them.
_CITATION_PATTERNS = (
  re.compile(r'\bspecs?\s*(?:§\s*|sections?\s+)?\d', re.IGNORECASE),
  re.compile(r'\bspecs?\s+`?' + _METHODS + r'\.md\b', re.IGNORECASE),
  re.compile(
    r'\b' + _METHODS + r'\.md`?\s*(?:§|sections?\b|\d)', re.IGNORECASE
  ),
  re.compile(r"(?<!paper )(?<!paper's )§\s*\d"),
  re.compile(r'\btff-0\.87\.md\b', re.IGNORECASE),
  re.compile(r'\bbenchmark-targets\.md\b', re.IGNORECASE),
  re.compile(r"\bspec(?:')s\b", re.IGNORECASE),
  re.compile(
    r"\b(?:the|its|this|each|a|method's|their)\s+specs?\b(?!\s*[=(])",
    re.IGNORECASE,
  ),
  re.compile(r'\(specs?\s*[);,:]', re.IGNORECASE),
)
# The project's own issue-tracker numbers mean nothing to a reader of a
# clone (another project's issue, linked to its tracker, is fine).
_ISSUE_PATTERNS = (
  re.compile(r'\bissues?\s+#?\d+\b', re.IGNORECASE),
  re.compile(r'(?<![\w&/#])#\d+\b'),
)

# A link to another site (an external tracker's issue is fine to name).
_EXTERNAL_LINK = re.compile(r'\[[^\]]*\]\((?:https?|mailto):[^)]*\)')
_FENCE = re.compile(r'^\s*(```|~~~)')
_INLINE_CODE = re.compile(r'(`+)(?:(?!\1).)+?\1')
_LINK = re.compile(
  r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]'  # The link text, one level of [] inside.
  r'\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)'
)  # (target "title")
_REFERENCE_DEFINITION = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)')
_HEADING = re.compile(r'^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$')
_HTML_ANCHOR = re.compile(r'<a\s+(?:name|id)="([^"]+)"', re.IGNORECASE)
_EXTERNAL_SCHEMES = ('http://', 'https://', 'mailto:', 'ftp://', 'doi:')


def repository_files() -> list[str]:
  """Paths (relative to ROOT) of the repository's files, sorted.

  Tracked files and new files git does not ignore, when git can list them;
  otherwise every file under ROOT outside `_SKIPPED_DIRS` and `bazel-*`.
  """
  try:
    listed = (
      subprocess.run(
        ['git', 'ls-files', '--cached', '--others', '--exclude-standard', '-z'],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
      )
      .stdout.decode('utf-8')
      .split('\0')
    )
    files = {f for f in listed if f and os.path.isfile(os.path.join(ROOT, f))}
    if files:
      return sorted(files)
  except (OSError, subprocess.SubprocessError):
    pass
  files = set()
  for directory, subdirs, names in os.walk(ROOT):
    subdirs[:] = [
      d
      for d in subdirs
      if d not in _SKIPPED_DIRS and not d.startswith('bazel-')
    ]
    for name in names:
      files.add(os.path.relpath(os.path.join(directory, name), ROOT))
  return sorted(files)


def _is_text_file(path: str) -> bool:
  name = os.path.basename(path)
  if name in _TEXT_NAMES or os.path.splitext(name)[1] in _TEXT_EXTENSIONS:
    return True
  if os.path.splitext(name)[1]:
    return False
  # Extensionless scripts (for example .ci/run).
  with open(os.path.join(ROOT, path), 'rb') as f:
    return f.read(2) == b'#!'


def checked_files() -> list[str]:
  return [f for f in repository_files() if _is_text_file(f) and f != _THIS_FILE]


def markdown_files() -> list[str]:
  return [f for f in repository_files() if f.endswith('.md')]


def _read(path: str) -> str:
  with open(os.path.join(ROOT, path), encoding='utf-8', errors='replace') as f:
    return f.read()


def _markdown_prose(text: str) -> Iterator[tuple[int, str]]:
  """(line number, line) outside fenced code blocks."""
  fence = None
  for number, line in enumerate(text.splitlines(), start=1):
    match = _FENCE.match(line)
    if match:
      if fence is None:
        fence = match.group(1)
      elif match.group(1) == fence:
        fence = None
      continue
    if fence is None:
      yield number, line


def _python_text(text: str) -> Iterator[tuple[int, str]]:
  """(line number, text) of the comments and strings of Python source.

  Identifiers are left out, so a variable named `spec` is not a citation.
  Falls back to every line when the source does not tokenize.
  """
  try:
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
  except (tokenize.TokenError, SyntaxError, IndentationError):
    yield from enumerate(text.splitlines(), start=1)
    return
  for token in tokens:
    if token.type in (tokenize.COMMENT, tokenize.STRING):
      for offset, line in enumerate(token.string.splitlines()):
        yield token.start[0] + offset, line
    elif getattr(tokenize, 'FSTRING_MIDDLE', None) == token.type:
      yield token.start[0], token.string


def _checked_lines(path: str) -> Iterator[tuple[int, str]]:
  text = _read(path)
  name = os.path.basename(path)
  if (
    path.endswith('.py')
    or name in ('BUILD', 'WORKSPACE')
    or (path.endswith('.bzl'))
  ):
    yield from _python_text(text)
  else:
    yield from enumerate(text.splitlines(), start=1)


def _find(paths: Iterable[str], patterns, lines_of=_checked_lines) -> list[str]:
  offenders = []
  for path in paths:
    for number, line in lines_of(path):
      for pattern in patterns:
        match = pattern.search(line)
        if match:
          offenders.append(
            f'{path}:{number}: {match.group(0)!r} in {line.strip()[:160]!r}'
          )
          break
  return offenders


def github_slug(heading: str) -> str:
  """The anchor GitHub gives a Markdown heading (before de-duplication)."""
  text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # Links: text.
  text = re.sub(r'<[^>]+>', '', text)  # HTML tags.
  text = text.replace('`', '').strip().lower()
  kept = []
  for char in text:
    category = unicodedata.category(char)
    if char in ' -_' or category[0] in 'LN' or category == 'Mn':
      kept.append(char)
  return ''.join(kept).replace(' ', '-')


def anchors(path: str) -> set[str]:
  """Every `#fragment` a link into the Markdown file `path` may use."""
  found = set()
  counts = collections.Counter()
  for _, line in _markdown_prose(_read(path)):
    found.update(_HTML_ANCHOR.findall(line))
    match = _HEADING.match(line)
    if not match:
      continue
    slug = github_slug(match.group(2))
    found.add(slug if not counts[slug] else f'{slug}-{counts[slug]}')
    counts[slug] += 1
  return found


def _links(path: str) -> Iterator[tuple[int, str]]:
  for number, line in _markdown_prose(_read(path)):
    prose = _INLINE_CODE.sub('', line)
    for match in _LINK.finditer(prose):
      yield number, match.group(1)
    match = _REFERENCE_DEFINITION.match(prose)
    if match:
      yield number, match.group(1)


def broken_link(path: str, target: str) -> Optional[str]:
  """Why the link `target` of the Markdown file `path` is broken, or None."""
  if target.startswith(_EXTERNAL_SCHEMES):
    return None
  target_path, _, fragment = target.partition('#')
  target_path = urllib.parse.unquote(target_path.partition('?')[0])
  if not target_path:
    resolved = path
  elif target_path.startswith('/'):
    resolved = os.path.normpath(target_path.lstrip('/'))
  else:
    resolved = os.path.normpath(
      os.path.join(os.path.dirname(path), target_path)
    )
  if resolved == '..' or resolved.startswith('../'):
    return 'points outside the repository'
  full = os.path.join(ROOT, resolved)
  if not os.path.exists(full):
    return f'{resolved} does not exist'
  if fragment and resolved.endswith('.md') and os.path.isfile(full):
    if urllib.parse.unquote(fragment).lower() not in anchors(resolved):
      return f'{resolved} has no heading #{fragment}'
  return None


class DocsTest(absltest.TestCase):
  maxDiff = None
  longMessage = False  # The message alone: one offender per line.

  def test_finds_the_repository(self):
    self.assertTrue(
      os.path.exists(os.path.join(ROOT, 'WORKSPACE')),
      f'{ROOT} is not the repository root (no WORKSPACE).',
    )
    self.assertIn('README.md', markdown_files())
    self.assertIn(
      os.path.join('tff_aggregators', '__init__.py'), checked_files()
    )

  def test_github_slug(self):
    self.assertEqual(
      github_slug('Set-up: `make demo` & tests'), 'set-up-make-demo--tests'
    )
    self.assertEqual(github_slug('FedLAW (ICML 2023)'), 'fedlaw-icml-2023')
    self.assertEqual(github_slug('Eq. 8, γ_l'), 'eq-8-γ_l')

  def test_every_relative_link_resolves(self):
    offenders = []
    for path in markdown_files():
      for number, target in _links(path):
        reason = broken_link(path, target)
        if reason:
          offenders.append(f'{path}:{number}: ({target}) {reason}')
    self.assertFalse(
      offenders,
      'Broken relative links:\n' + '\n'.join(offenders),
    )

  def test_no_file_refers_to_a_path_outside_the_repository(self):
    offenders = _find(checked_files(), _OUTSIDE_PATTERNS)
    self.assertFalse(
      offenders,
      'Files referring to paths outside the repository (a clone does not '
      'have them; say it here or in docs/):\n' + '\n'.join(offenders),
    )

  def test_no_file_cites_the_implementation_notes(self):
    offenders = _find(checked_files(), _CITATION_PATTERNS)
    self.assertFalse(
      offenders,
      "Files citing the authors' implementation notes (a clone does not "
      "have them; cite the paper's equations or docs/methods/ instead):\n"
      + '\n'.join(offenders),
    )

  def test_no_markdown_file_names_an_issue_number(self):
    offenders = _find(
      markdown_files(),
      _ISSUE_PATTERNS,
      lines_of=lambda p: (
        (n, _EXTERNAL_LINK.sub('', _INLINE_CODE.sub('', line)))
        for n, line in _markdown_prose(_read(p))
      ),
    )
    self.assertFalse(
      offenders,
      'Markdown naming issue-tracker numbers:\n' + '\n'.join(offenders),
    )

  def test_the_checks_catch_what_they_should(self):
    def offends(patterns, line):
      return any(p.search(line) for p in patterns)

    # The offending examples are assembled here (<s> is "spec", <d> the
    # notes' folder, <m> ".md"), so that this file does not itself hold
    # what the repository-wide checks refuse.
    def example(text):
      return (
        text.replace('<s>[1:]', 'pec')
        .replace('<s>', 'spec')
        .replace('<d>', 'shared')
        .replace('<m>', '.md')
      )

    for line in (
      'see ../<d>/notes/x',
      'in /work/<d>/<s>s',
      '<d>/<s>s/fedlaw<m>',
    ):
      self.assertTrue(offends(_OUTSIDE_PATTERNS, example(line)), line)
    for line in (
      '<s> 2.3',
      'S<s>[1:] 8.5: universal',
      '<s> section 5',
      '<s> `fedlaw<m>` section 6.2',
      'fedcda<m> section 6',
      'fedlws<m> §6.6',
      'tff-0.87<m>',
      "the <s>'s defaults",
      'normalised to sum 1 (<s>) or',
      'passes per round (<s>: 100)',
      'as the <s> expects',
    ):
      self.assertTrue(offends(_CITATION_PATTERNS, example(line)), line)
    for line in (
      'tf.TensorSpec',
      'element_spec',
      'spec = load(path)',
      'see docs/methods/fedcda.md',
      '[FedCDA](methods/fedcda.md)',
    ):
      self.assertFalse(offends(_CITATION_PATTERNS, line), line)
    # In Python only comments and strings are read, not identifiers.
    self.assertEqual(
      list(_python_text('spec = module_from_spec(spec)  # (spec)\n')),
      [(1, '# (spec)')],
    )
    self.assertTrue(offends(_ISSUE_PATTERNS, 'done in issue 9'))
    self.assertTrue(offends(_ISSUE_PATTERNS, 'FedCDA (#6)'))
    self.assertFalse(offends(_ISSUE_PATTERNS, 'see [x](a.md#section-6)'))
    self.assertFalse(
      offends(
        _ISSUE_PATTERNS,
        _EXTERNAL_LINK.sub(
          '', 'TFF [#3709](https://github.com/o/r/issues/3709) reports'
        ),
      )
    )
    self.assertIsNone(broken_link('README.md', 'https://example.org/x'))
    self.assertIsNotNone(broken_link('README.md', '../outside.md'))
    self.assertIsNotNone(broken_link('README.md', 'no_such_file.md'))


if __name__ == '__main__':
  absltest.main()
