"""Running an example as its docstring says: one command, on the embedded log."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    """The example module, imported without running its ``main``."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(name: str, log_dir: Path, timeout: float = 300) -> str:
    """``python examples/NAME.py LOG_DIR``; its stdout, after checking it succeeded."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), str(log_dir)],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"examples/{name}.py exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def printed(stdout: str, label: str) -> Any:
    """The Python literal an example printed after ``label``."""
    (line,) = [line for line in stdout.splitlines() if line.startswith(label)]
    return ast.literal_eval(line.removeprefix(label).strip())
