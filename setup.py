"""Map the three source folders onto one import namespace: gemkit, gemkit.envs, gemkit.synth."""

from setuptools import find_namespace_packages, setup

ROOTS = {"gemkit": "gemkit", "gemkit.envs": "envs", "gemkit.synth": "synth"}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for name, folder in ROOTS.items():
        package_dir[name] = folder
        packages.append(name)
        # namespace packages too: a data folder (envs/math/data) is a package of its own, so
        # setuptools ships it without its "absent from the packages configuration" warning
        subs = find_namespace_packages(folder, exclude=["*__pycache__*"])
        packages += [f"{name}.{sub}" for sub in subs]
    return packages, package_dir


packages, package_dir = _packages()
setup(
    packages=packages,
    package_dir=package_dir,
    # the verifiers taskset id `gemkit-verifiers`: verifiers imports it as a top-level module
    py_modules=["gemkit_verifiers"],
    include_package_data=True,
    # the `__init__.pyi` stubs are read at import time: they list the lazy exports; py.typed
    # tells type checkers to read them (PEP 561)
    package_data={
        "": ["*.txt", "*.json", "*.jsonl", "*.sh", "*.yaml", "*.pyi", "*.css", "*.js", "py.typed"]
    },
)
