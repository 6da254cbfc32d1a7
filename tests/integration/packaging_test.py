"""The pip package ships every library module."""

import os
import tomllib

from absl.testing import absltest
import setuptools

from tests import test_utils


class PackagingTest(absltest.TestCase):
  def test_every_library_module_is_in_a_discovered_package(self):
    with open(os.path.join(test_utils.REPO_ROOT, 'pyproject.toml'), 'rb') as f:
      find = tomllib.load(f)['tool']['setuptools']['packages']['find']
    packages = set(
      setuptools.find_packages(test_utils.REPO_ROOT, include=find['include'])
    )
    library = os.path.join(test_utils.REPO_ROOT, 'tff_aggregators')
    for directory, _, files in os.walk(library):
      if any(f.endswith('.py') for f in files):
        package = os.path.relpath(directory, test_utils.REPO_ROOT).replace(
          os.sep, '.'
        )
        self.assertIn(package, packages)


if __name__ == '__main__':
  absltest.main()
