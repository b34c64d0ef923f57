"""`pip install clients/python` works offline: pyproject.toml builds with the setuptools
the system already has (--no-build-isolation --no-index: nothing is fetched), and the
installed package imports from outside the source tree with the source's version.

Tried with the Python running the tests, then Debian's /usr/bin/python3; skipped (loudly)
where neither can make a venv that sees pip and a setuptools >= 61 able to build wheels (Debian: apt-get install python3-setuptools
python3-pip python3-venv; .ci/run installs them as root)."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, ".."))


def _setuptools_ok(python):
    """setuptools >= 61 (reads [project]) that can build a wheel: with the wheel package
    (Debian's python3-pip depends on python3-wheel) or >= 70.1 (bdist_wheel built in)."""
    code = ("import importlib.util, setuptools, sys; v = tuple(int(x) for x in setuptools.__version__.split('.')[:2]); "
            "sys.exit(0 if v >= (61, 0) and (v >= (70, 1) or importlib.util.find_spec('wheel')) else 1)")
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


class PipInstallTest(unittest.TestCase):
    def test_pip_install_offline(self):
        tmp = tempfile.mkdtemp(prefix="fulcrum-pip-")
        self.addCleanup(shutil.rmtree, tmp, True)
        # The Python running the tests first, then Debian's (.ci/run installs its
        # setuptools, pip and venv as root; a pyenv or other Python may have none).
        py, why = None, []
        for i, python in enumerate(dict.fromkeys([sys.executable, "/usr/bin/python3"])):
            if not os.path.exists(python):
                continue
            venv = os.path.join(tmp, "venv{}".format(i))
            made = subprocess.run([python, "-m", "venv", "--system-site-packages", venv], capture_output=True, text=True)
            cand = os.path.join(venv, "bin", "python")
            if made.returncode != 0 or not os.path.exists(cand):
                why.append("{}: cannot make a venv: {}".format(python, made.stderr.strip()[-200:]))
                continue
            if not _setuptools_ok(cand) or subprocess.run([cand, "-m", "pip", "--version"], capture_output=True).returncode != 0:
                why.append("{}: no pip, or no setuptools >= 61 with wheel".format(python))
                continue
            py = cand
            break
        if py is None:
            self.skipTest("SKIPPED: {} (apt-get install python3-setuptools python3-pip python3-venv)".format("; ".join(why)))
        venv = os.path.dirname(os.path.dirname(py))
        # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
        src = os.path.join(tmp, "src")
        shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
        out = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-cache-dir", src],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, "pip install failed:\n" + out.stdout[-2000:] + out.stderr[-2000:])
        shutil.rmtree(src)  # the import below must come from the venv, not the copy
        got = subprocess.run([py, "-c", "import fulcrum_client as f; print(f.__version__); print(f.__file__)"],
                             capture_output=True, text=True, cwd=tmp)
        self.assertEqual(got.returncode, 0, got.stderr)
        version, path = got.stdout.split()
        sys.path.insert(0, SRC)
        import fulcrum_client
        self.assertEqual(version, fulcrum_client.__version__)
        self.assertTrue(path.startswith(venv), "imported from {}, want the venv {}".format(path, venv))
        show = subprocess.run([py, "-m", "pip", "show", "fulcrum-client"], capture_output=True, text=True)
        self.assertIn("License: Apache-2.0", show.stdout)


if __name__ == "__main__":
    unittest.main()
