"""`make demo` (`python -m demo`): a three-node cluster on loopback driven through the real
command lines and HTTP API, beside the product rather than inside it.

Nothing in the product imports it and the image does not hold it (`pyproject.toml` installs
only the product packages, `.dockerignore` lets only them into the build): it is a program
that uses the product, as an operator would.
"""
