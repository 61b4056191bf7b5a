"""The book: every lesson as the headless run executed it, as a static site (``make book``).

:mod:`book.build` builds it (with :mod:`book.pages`' generated pieces); :mod:`book.check` checks it.
"""
