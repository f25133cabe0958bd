"""`python -m toolyard ARGS`: the toolyard binary this package carries."""

from toolyard._bin import main

main()
