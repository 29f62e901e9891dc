"""Maps the folder core/ to the import package `tilecraft` (metadata lives in pyproject.toml)."""

from setuptools import find_packages, setup

setup(
    packages=["tilecraft"] + [f"tilecraft.{name}" for name in find_packages("core")],
    package_dir={"tilecraft": "core"},
)
