"""The wheel installs one import package, `costlab`, and no top-level `datasets`, `train` or `export`."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from conftest import REPO

from costlab.cli import build_parser, main


def test_wheel_installs_only_costlab(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("costlab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"costlab", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for sub in ("metaschedule", "datasets", "featurizers", "costmodels", "train", "export", "commands", "common"):
        assert f"costlab/{sub}/__init__.py" in names
    assert "costlab/datasets/store.py" in names
    # every subpackage of the tree travels (setup.cfg lists packages one by one: a new folder left out of it
    # would import in a development install and be missing from the wheel)
    for folder in ("metaschedule", "datasets", "featurizers", "costmodels", "train", "export"):
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.relative_to(REPO / folder)
            assert f"costlab/{folder}/{rel.as_posix()}" in names, f"{folder}/{rel.parent} is not in the wheel"
    from costlab.costmodels.shipped import versioned_names

    for name in versioned_names():  # the shipped models travel in the wheel, with the aliases of their names
        assert {f"costlab/costmodels/models/{name}/config.json",
                f"costlab/costmodels/models/{name}/model.safetensors"} <= set(names)
    assert "costlab/costmodels/models/aliases.json" in names
    for starter in (REPO / "export" / "library" / "starter").glob("*.json.gz"):  # the starter schedule library
        assert f"costlab/export/library/starter/{starter.name}" in names
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "costlab = costlab.cli:main" in entry


def test_a_python_started_in_the_checkout_finds_the_subpackages_without_an_installed_costlab():
    """``python -m``/``-c`` in the checkout's root (as TVM starts its pool workers) puts the checkout's costlab/
    first on the path, ahead of an installed costlab: its subpackages are then the checkout's folders. No site
    (-S): nothing installed, no development install's finder."""
    code = ("import importlib.util as u; "
            "print(*(u.find_spec('costlab.' + s).origin for s in ('export', 'datasets', 'export.check')))")
    done = subprocess.run([sys.executable, "-S", "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(REPO / "export" / "__init__.py"), str(REPO / "datasets" / "__init__.py"),
                                   str(REPO / "export" / "check.py")]


def test_common_imports_nothing_above_it():
    """costlab.common is the bottom room: its modules import no other part of costlab."""
    import ast

    for path in (REPO / "costlab" / "common").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                assert name == "costlab.common" or name.startswith("costlab.common.") or \
                    name.split(".")[0] != "costlab", f"{path.name} imports {name}"
            assert not (isinstance(node, ast.ImportFrom) and node.level > 1), f"{path.name}: relative import above"


# The layers, bottom first (README.md's Layout): a module may import its own layer and those below it.
LAYERS = {"common": REPO / "costlab" / "common", "metaschedule": REPO / "metaschedule", "datasets": REPO / "datasets",
          "featurizers": REPO / "featurizers",
          "costmodels": REPO / "costmodels", "train": REPO / "train", "export": REPO / "export",
          "commands": REPO / "costlab" / "commands"}
ORDER = list(LAYERS)


def _layer_of(module: str) -> str | None:
    """The layer of an imported module; None for anything outside costlab, "" for the root package (its
    ``__init__`` holds ``__version__`` and imports nothing, so it sits below every layer)."""
    parts = module.split(".")
    if parts[0] != "costlab":
        return None
    if len(parts) == 1:
        return ""
    if parts[1] in ("cli", "__main__"):
        return "commands"
    assert parts[1] in LAYERS, f"costlab.{parts[1]} is in no layer"
    return parts[1]


def _costlab_imports(path, package: list[str]):
    """(line, module) of every import in a module, at the top and inside functions alike; relative imports
    resolved against ``package``; ``from costlab import x`` names ``costlab.x`` unless x is ``__version__``."""
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            if base == "costlab":
                yield from ((node.lineno, "costlab" if a.name == "__version__" else f"costlab.{a.name}")
                            for a in node.names)
            else:
                yield node.lineno, base


def test_every_layer_imports_only_downward():
    """No module of any layer imports a layer above its own: common < metaschedule < datasets < featurizers < costmodels <
    train < export < commands (with ``costlab/cli.py`` and ``__main__.py``). Every import counts, those
    inside functions too; imports by name at run time (``importlib``) are not seen."""
    # the package itself imports none of costlab (and of the standard library only os)
    assert [m for _, m in _costlab_imports(REPO / "costlab" / "__init__.py", ["costlab"])] == ["os"]
    modules = [(layer, path, ["costlab", layer, *path.relative_to(folder).parent.parts])
               for layer, folder in LAYERS.items() for path in sorted(folder.rglob("*.py"))]
    modules += [("commands", REPO / "costlab" / name, ["costlab"]) for name in ("cli.py", "__main__.py")]
    assert {layer for layer, _, _ in modules} == set(ORDER)
    upward = []
    for layer, path, package in modules:
        for line, module in _costlab_imports(path, package):
            imported = _layer_of(module)
            if imported and ORDER.index(imported) > ORDER.index(layer):
                upward.append(f"{path.relative_to(REPO)}:{line} ({layer}) imports {module} ({imported})")
    assert not upward, "imports up the stack:\n" + "\n".join(upward)


def test_parser_builds_without_torch():
    """Building the command line (``costlab --help`` at every level) imports neither torch, Lightning nor TVM:
    the choices it lists come from torch-free registries (``costmodels/kinds.py`` with ``nets.py``,
    ``baselines.py`` and ``untrained.py``, ``costmodels/recipes.py``, ``export/search``)."""
    code = (
        "import argparse, sys\n"
        "import costlab.cli\n"
        "def walk(p):\n"
        "    p.format_help()\n"
        "    for a in p._actions:\n"
        "        if isinstance(a, argparse._SubParsersAction):\n"
        "            for sub in a.choices.values():\n"
        "                walk(sub)\n"
        "walk(costlab.cli.build_parser())\n"
        "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning', 'tvm') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]", f"building the parser imported {out.strip()}"


def _walk(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield from _walk(sub, path + (name,))


def test_help_on_every_level(capsys):
    seen = []
    for path, parser in _walk(build_parser()):
        assert parser.description, f"costlab {' '.join(path)} has no description"
        try:
            main(list(path) + ["--help"])
        except SystemExit as exc:
            assert exc.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: costlab") and parser.description.split()[0] in out
        seen.append(path)
    assert ("dataset", "import-ansor") in seen and ("dataset", "measure") in seen
