"""The pip package ships every library module; each package has `__all__`."""

import importlib
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

  def test_every_package_declares_its_public_names(self):
    library = os.path.join(test_utils.REPO_ROOT, 'tff_aggregators')
    for directory, _, files in os.walk(library):
      if '__init__.py' not in files:
        continue
      package = os.path.relpath(directory, test_utils.REPO_ROOT).replace(
        os.sep, '.'
      )
      module = importlib.import_module(package)
      self.assertTrue(hasattr(module, '__all__'), package)
      self.assertNotEmpty(module.__all__, package)
      submodules = {
        f[: -len('.py')]
        for f in files
        if f.endswith('.py') and not f.startswith('_')
      }
      for name in module.__all__:
        if name in submodules:
          importlib.import_module(f'{package}.{name}')
        else:
          self.assertTrue(hasattr(module, name), f'{package}.{name}')
      if set(module.__all__) <= submodules:  # A package of modules: all.
        self.assertEqual(set(module.__all__), submodules, package)


if __name__ == '__main__':
  absltest.main()
