"""Maps the top-level folders onto the `dsh` namespace (pyproject holds the rest).

Each folder (`sandbox/`, `runners/`, ...) is the package `dsh.<folder>`; its
subpackages are found here so that adding one needs no packaging edit.
"""

from setuptools import find_packages, setup

TOP_LEVEL = ("cli", "sandbox", "runners", "executors", "tools", "profiles")

packages = []
for top in TOP_LEVEL:
    packages.append(f"dsh.{top}")
    packages.extend(f"dsh.{top}.{sub}" for sub in find_packages(top))

setup(packages=packages)
