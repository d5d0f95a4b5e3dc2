import sys

# kio registers hypothesis strategies for its types whenever hypothesis can be imported (in a
# test environment, where the pytest fixtures start nodes); a node never uses them, and
# importing hypothesis (and pytest, through trio.testing) was 40% of a node's start-up CPU.
# Marking it absent makes kio's `import hypothesis.strategies` fail as it does where it is
# not installed.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from minibroker.tools.cli import main  # noqa: E402

sys.exit(main())
