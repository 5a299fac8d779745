"""mkdocs hooks: the guide's install commands follow ``repo_url`` in mkdocs.yml.

mkdocs runs ``on_page_markdown`` for every page. A page that says how to get the
source writes the marker ``<!-- get-the-source -->`` on a line of its own; it becomes
the clone command when ``repo_url`` is set, and a sentence without any address when it
is not, so the guide never shows an address that was not configured. A hook rather
than a templating plugin: one substitution, no new dependency for the docs build.
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- get-the-source -->"


def source_block(repo_url: str) -> str:
    """The Markdown that replaces the marker: the clone commands, or where to get the source without an address."""
    url = (repo_url or "").strip()
    if not url:
        return (
            "This guide names no public address for the repository yet. Get the source from where\n"
            "you learnt about neuronprof (a clone or an archive of its repository), and go into\n"
            "its folder, the one with `pyproject.toml`:\n\n"
            "```console\n$ cd neuronprof\n```"
        )
    folder = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or "neuronprof"
    return f"Clone the repository and go into it:\n\n```console\n$ git clone {url}\n$ cd {folder}\n```"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, source_block(config.get("repo_url") or ""))
