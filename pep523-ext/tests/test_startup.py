"""The .pth start-up hook: ARGSTASH_PEP523=1 installs at start-up; unset is a no-op."""

import os
import site
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
loaded = "argstash" in sys.modules
import argstash
print(loaded, argstash.installed())
"""


def test_pth_file_is_installed_in_site_packages():
    import argstash

    pth = Path(argstash.__file__).resolve().parent.parent / "argstash_pep523.pth"
    assert pth.is_file(), pth
    text = pth.read_text()
    assert text.startswith("import os;") and "ARGSTASH_PEP523" in text
    assert str(pth.parent) in [str(Path(p).resolve()) for p in site.getsitepackages()] + [
        str(Path(p).resolve()) for p in sys.path
    ]


def test_unset_or_zero_is_a_no_op_that_does_not_import_the_extension(run_py):
    for env in ({}, {"ARGSTASH_PEP523": ""}, {"ARGSTASH_PEP523": "0"}):
        p = run_py(PROBE, env=env)
        assert p.stdout.split() == ["False", "False"], (env, p.stdout, p.stderr)
        assert p.stderr == ""


def test_set_installs_at_start_up(run_py):
    p = run_py(PROBE, env={"ARGSTASH_PEP523": "1"})
    assert p.stdout.split() == ["True", "True"], (p.stdout, p.stderr)
    assert p.stderr == ""


def test_an_unmodified_program_runs_hooked(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(
        "import sys\n"
        "def fib(n):\n"
        "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "print(fib(20), sys.modules['argstash'].installed())\n"
    )
    env = dict(os.environ, ARGSTASH_PEP523="1")
    p = subprocess.run([sys.executable, str(app)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["6765", "True"]
