"""costlab's own imports sit at the top of each module; one inside a function says why (``# lazy: pulls torch;
the parser must not``); no module imports another's private name. (That every layer imports only downward is
``test_packaging.py::test_every_layer_imports_only_downward``.)"""

from __future__ import annotations

import ast

from conftest import REPO

# the package's folders (costlab/ holds links to the others in a development checkout: read its own files only)
FOLDERS = ("metaschedule", "datasets", "featurizers", "costmodels", "train", "export")


def _modules():
    """(path relative to the repository, dotted package of the module, parsed module) of every module of costlab."""
    paths = [(p, ["costlab", folder, *p.relative_to(REPO / folder).parent.parts])
             for folder in FOLDERS for p in sorted((REPO / folder).rglob("*.py"))]
    paths += [(p, ["costlab", *p.relative_to(REPO / "costlab").parent.parts])
              for p in sorted((REPO / "costlab").rglob("*.py"))
              if p.relative_to(REPO / "costlab").parts[0] not in FOLDERS]
    for path, package in paths:
        yield path.relative_to(REPO).as_posix(), package, ast.parse(path.read_text())


def _costlab_module(node, package: list[str]) -> str | None:
    """The costlab module an import names (relative imports resolved against ``package``), else None."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names if a.name.split(".")[0] == "costlab"]
        return names[0] if names else None
    base = node.module or ""
    if node.level:
        base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
    return base if base.split(".")[0] == "costlab" else None


def _function_imports(tree):
    """Every import statement inside a function (or lambda), at any depth."""
    def visit(node, inside):
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            yield from visit(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    yield from visit(tree, False)


def test_costlab_imports_at_the_top_or_lazy_with_a_reason():
    """An import of a costlab module inside a function is kept there only for start-up (it pulls torch or TVM
    where the importer must stay light: the command line's parser, a model's loading), or to break a cycle,
    and its line says so: ``# lazy: <reason>``."""
    bare = []
    for rel, package, tree in _modules():
        lines = (REPO / rel).read_text().splitlines()
        for node in _function_imports(tree):
            module = _costlab_module(node, package)
            text = " ".join(lines[node.lineno - 1:node.end_lineno])
            reason = text.partition("# lazy:")[2].strip()
            if module and not reason:
                bare.append(f"{rel}:{node.lineno} imports {module} inside a function without '# lazy: <reason>'")
    assert not bare, "imports to move to the top of their module (or to give their reason):\n" + "\n".join(bare)


def test_no_private_name_imported_from_another_module():
    """``from costlab.x import _name`` across modules: a name used by two modules is public."""
    private = []
    for rel, package, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _costlab_module(node, package):
                private += [f"{rel}:{node.lineno} imports {a.name} from {_costlab_module(node, package)}"
                           for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert not private, "private names imported across modules:\n" + "\n".join(private)


def test_the_checks_see_the_package():
    """The walk finds every folder's modules, and a bare import inside a function is caught."""
    seen = {rel.split("/")[0] if not rel.startswith("costlab/") else "/".join(rel.split("/")[:2])
            for rel, _, _ in _modules()}
    assert set(FOLDERS) | {"costlab/cli.py", "costlab/commands", "costlab/common"} <= seen
    tree = ast.parse("def f():\n    from costlab.datasets import open_dataset\n    from . import x  # lazy: why\n")
    found = [(n.lineno, _costlab_module(n, ["costlab", "export"])) for n in _function_imports(tree)]
    assert found == [(2, "costlab.datasets"), (3, "costlab.export")]
