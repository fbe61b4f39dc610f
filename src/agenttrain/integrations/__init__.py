"""Bridges to other training stacks (verl). Each is an optional extra, imported lazily."""
