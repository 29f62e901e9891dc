"""Maps the folder core/ to the import package `tilecraft` (metadata lives in pyproject.toml)."""

from setuptools import find_packages, setup

setup(
    packages=["tilecraft"] + [f"tilecraft.{name}" for name in find_packages("core")]
    + ["tilecraft.scaffold_templates"],
    # the folder templates/ is the package data of `tilecraft new-target`
    package_dir={"tilecraft": "core", "tilecraft.scaffold_templates": "templates"},
    package_data={"tilecraft.scaffold_templates": ["target_plugin/*", "target_plugin/*/*"]},
)
