"""MegEngine's documented behaviour, written as MegEngine users write it."""
