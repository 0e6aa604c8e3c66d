# The README's two commands:
#   make run   — set everything up and run the main job on its embedded default
#   make test  — set everything up and run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run gateway simulate test lint bench reproduce clean image compose-up compose-down

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/dpbandit serve

# the Personalizer-compatible HTTP gateway, its learner in-process (docs/gateway.md)
gateway: $(STAMP)
	$(BIN)/dpbandit gateway

simulate: $(STAMP)
	$(BIN)/dpbandit simulate --env fliphat-paper --policy fliphat,random,lasso-bandit \
		--epsilon 1,5 --delta 0.01 --horizon 10000 --seeds 4 --plot regret.png --json regret.json

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	scripts/run-tests.sh $(BIN)/python

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/ruff format --check streaming_dpbandit bench

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/bench_fliphat.py
	$(BIN)/python bench/bench_linucb.py
	$(BIN)/python bench/bench_matroid.py
	$(BIN)/python bench/bench_replay.py
	@echo "bench/bench_scaling.py and bench/bench_broadcast.py need a broker: see docs/scaling.md"

reproduce: $(STAMP)
	$(BIN)/dpbandit reproduce fliphat --seeds 20 --plot fliphat-reproduction.png

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis regret.png regret.json

# Deployment (docs/operations.md); these need a Docker engine with the compose plugin.
IMAGE ?= dpbandit:0.1.0
COMPOSE := docker compose -f docker/docker-compose.yml

image:
	docker build -f docker/Dockerfile -t $(IMAGE) .

compose-up:
	$(COMPOSE) up --build

compose-down:
	$(COMPOSE) down
