"""The book: every lesson as the headless run executed it, as a static site (``make book``).

- :mod:`book.build` assembles the sources (``book/``, the executed notebooks, the generated
  pieces) and runs Sphinx with MyST-NB and the book theme; it executes nothing;
- :mod:`book.pages` generates the pieces that come from data;
- :mod:`book.check` checks the built site in headless Chromium (``make book-check``).
"""
