#!/usr/bin/env bash
# Gangway's main job on a local default: installs what it needs, starts Apache Kafka from its Maven
# Central jars (no Docker), creates Gangway's topics and prints the catalogue, then plays a demo
# scenario through the four deciders. Extra arguments go to `gangway scenario run`.
source "$(dirname "$0")/bootstrap.sh"
gangway kafka start
export KAFKA_BOOTSTRAP_SERVERS="${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}"
gangway topics --bootstrap-servers "$KAFKA_BOOTSTRAP_SERVERS"
if gangway --help | grep -q ' scenario '; then
    gangway scenario run tests/scenarios/demo.yaml "$@"
fi
echo "Kafka keeps running at $KAFKA_BOOTSTRAP_SERVERS; stop it with: .venv/bin/gangway kafka stop"
