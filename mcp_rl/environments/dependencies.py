"""An environment's own dependencies: what is missing and how to install it into mcp-rl's Python.

Most environments that fail to load miss a package of their own (`No module named 'langdetect'`).
The agent needs the module, the pip package that provides it, the environment's requirements
file if it has one, and the exact command for the Python that mcp-rl runs environments with.
The static check reads only the top-level imports found by discovery: nothing is imported.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from pydantic import BaseModel

from mcp_rl.environments.discovery import EnvironmentInfo
from mcp_rl.settings import PACKAGE_DIR

# Import names whose pip package is named differently (only the common ones).
PIP_NAMES = {
    "yaml": "pyyaml",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "cv2": "opencv-python",
    "PIL": "pillow",
    "bs4": "beautifulsoup4",
    "dotenv": "python-dotenv",
    "dateutil": "python-dateutil",
    "Levenshtein": "levenshtein",
    "attr": "attrs",
    "jwt": "PyJWT",
    "docx": "python-docx",
    "fitz": "pymupdf",
    "Bio": "biopython",
    "git": "GitPython",
    "zmq": "pyzmq",
    "Crypto": "pycryptodome",
    "faiss": "faiss-cpu",
    "magic": "python-magic",
    "serial": "pyserial",
    "tree_sitter": "tree-sitter",
    "mpl_toolkits": "matplotlib",
    "pkg_resources": "setuptools",
    "google": "protobuf",
    "igraph": "python-igraph",
    "OpenGL": "PyOpenGL",
    "gem": "gem-llm",
}
_REQUIREMENT_FILES = ("requirements.txt", "requirements-env.txt", "pyproject.toml", "setup.py")


class MissingDependency(BaseModel):
    """A module the environment imports that mcp-rl's Python does not have."""

    module: str
    package: str
    requirements: list[Path] = []
    commands: list[str]

    def sentence(self, env_name: str) -> str:
        req = ""
        if self.requirements:
            req = f" Its own requirements: {', '.join(str(p) for p in self.requirements)}."
        return (
            f"Environment {env_name!r} needs the Python module {self.module!r} (pip package "
            f"{self.package!r}), which is not installed in mcp-rl's Python.{req} Install with: "
            + " or ".join(self.commands)
            + ", then select it again."
        )


def pip_package(module: str) -> str:
    top = module.split(".")[0]
    return PIP_NAMES.get(top, top.replace("_", "-"))


def requirement_files(file_path: Path, project_root: Path) -> list[Path]:
    """Requirement files of the environment: the nearest folder (from its own up to its project
    root) that has any."""
    folder = file_path.parent
    stops = {project_root.resolve(), Path(folder.anchor)}
    while True:
        if folder.resolve() == PACKAGE_DIR.parent:
            return []  # mcp-rl's own checkout (its bundled and test environments): not theirs
        found = [folder / name for name in _REQUIREMENT_FILES if (folder / name).is_file()]
        if found:
            return found
        if folder.resolve() in stops or folder.parent == folder:
            return []
        folder = folder.parent


def missing_dependency(module: str, file_path: Path, project_root: Path) -> MissingDependency:
    package = pip_package(module)
    python = sys.executable
    requirements = requirement_files(file_path, project_root)
    commands = [f"{python} -m pip install {package}"]
    for req in requirements:
        if req.name.endswith(".txt"):
            commands.append(f"{python} -m pip install -r {req}")
    return MissingDependency(module=module, package=package, requirements=requirements, commands=commands)


def _local_module(name: str, env: EnvironmentInfo) -> bool:
    """The environment's own module (a sibling file or package, or one at its project root)."""
    for folder in {env.file_path.parent, env.project_root}:
        if (folder / f"{name}.py").is_file() or (folder / name).is_dir():
            return True
    return False


class ImportChecker:
    """Static dependency check, one per listing: `find_spec` of top-level names only (it finds,
    never imports, a top-level module), answers cached for the listing."""

    def __init__(self) -> None:
        importlib.invalidate_caches()  # see packages installed since the last listing
        self._found: dict[str, bool] = {}

    def found(self, name: str) -> bool:
        if name in sys.stdlib_module_names or name in sys.builtin_module_names:
            return True
        hit = self._found.get(name)
        if hit is None:
            try:
                hit = importlib.util.find_spec(name) is not None
            except (ImportError, ValueError):
                hit = False
            self._found[name] = hit
        return hit

    def missing(self, env: EnvironmentInfo) -> list[str]:
        return [name for name in env.imports if not self.found(name) and not _local_module(name, env)]
