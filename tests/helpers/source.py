"""Reading the product's source as syntax, for the tests that hold it to its vocabulary."""

from __future__ import annotations

import ast

DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstring_ids(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are module, class or function docstrings: prose, which
    may name a value that code must not spell."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, DOCUMENTED) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out
