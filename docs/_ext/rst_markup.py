"""A griffe extension for the docs build: reST markup in parl's docstrings, shown as Markdown.

parl's docstrings are Google style but use a little Sphinx markup: roles such as
``:class:`LayerFunc``` and ``:meth:`Manager.run```, and a paragraph ending in ``::``
before an indented example. Rendered as Markdown these would show the role names and the
double colon; this extension rewrites them, before mkdocstrings renders anything:

- ``:class:`parl.Model``` (any role, ``~`` allowed) becomes the code span ``parl.Model``;
- a line ending in ``::`` ends in ``:``, and a line that is only ``::`` is dropped
  (the indented block after it is a code block in Markdown too).

mkdocs.yml loads it with the handler option ``extensions: [docs/_ext/rst_markup.py]``;
``exclude_docs`` keeps this file out of the site. The source files are not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|obj|exc|const):`~?([^`]+)`")
_DOUBLE_COLON = re.compile(r"(?<=\S)::[ \t]*$", re.MULTILINE)
_LONE_DOUBLE_COLON = re.compile(r"^[ \t]*::[ \t]*\n", re.MULTILINE)


def rst_to_markdown(text: str) -> str:
    """Rewrite the reST roles and ``::`` paragraph ends of one docstring."""
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    text = _LONE_DOUBLE_COLON.sub("", text)
    return _DOUBLE_COLON.sub(":", text)


class RstMarkup(griffe.Extension):
    """Apply :func:`rst_to_markdown` to the docstring of every object griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
