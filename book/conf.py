"""Sphinx configuration of the TPU Field Guide book.

tools/book/build.py copies this folder and the executed notebooks into build/book/src and runs
Sphinx there with -W: a warning fails the build. Nothing here executes a notebook or reaches the
network: the outputs shown are the ones the headless run stored.
"""

from sphinx.util import logging

project = "TPU Field Guide"
author = "the TPU Field Guide authors"
copyright = "the TPU Field Guide authors"  # noqa: A001 (Sphinx's name for it)
html_title = "TPU Field Guide"

# githubpages writes .nojekyll, so that GitHub Pages serves the _static/ and _images/ folders.
# No sphinx.ext.intersphinx: it downloads inventories at build time.
extensions = ["myst_nb", "sphinx.ext.githubpages"]
# _generated/ holds pieces that pages {include}; they are not pages themselves.
exclude_patterns = ["_build", "jupyter_execute", "_generated", "**/.ipynb_checkpoints"]

# Render the outputs stored by the headless run; never execute.
nb_execution_mode = "off"
# Markdown outputs (the self-test report) carry tables: CommonMark, the default, has none.
nb_render_markdown_format = "myst"
nb_output_stderr = "show"  # stderr stays visible, styled apart in _static/book.css
nb_merge_streams = False  # tools/book/build.py joins consecutive streams, keeping their order
# No dollarmath/amsmath: pages carry no math, so Sphinx never adds MathJax (a CDN script).
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3  # Markdown links to #section-anchors resolve, and are checked

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_sourcelink_suffix = ""  # the download button serves the executed .ipynb itself
# Without a default mode the theme logs "Got invalid theme mode" (a console error) on a first visit.
html_context = {"default_mode": "auto"}
# The repository button's address and branch come from pyproject.toml's repository setting:
# tools/book/build.py passes them (sphinx -D html_theme_options.repository_url=...).
html_theme_options = {
    "use_repository_button": True,
    "use_download_button": True,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    # The theme's own launch buttons know Colab but not Kaggle, and would link every page to
    # path_to_docs/<page>.ipynb; the lesson pages carry their own Colab and Kaggle buttons instead
    # (tools/book/build.py turns each notebook's badge cell into them).
    "launch_buttons": {},
}

_log = logging.getLogger(__name__)


def _refuse_math(app, pagename, templatename, context, doctree):
    """Fail the build (under -W) if a page has math: MathJax would then load from a CDN."""
    if context.get("has_maths_elements"):
        _log.warning(
            "%s contains math; MathJax is not bundled and would load from the network", pagename
        )


def setup(app):
    app.connect("html-page-context", _refuse_math)
