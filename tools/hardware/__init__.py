"""The hardware lane: every lesson run on a real TPU host, and the records that say so."""
