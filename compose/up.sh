#!/usr/bin/env bash
# Gangway's main job on a local default: installs what it needs, starts Apache Kafka from its Maven
# Central jars (no Docker), then `gangway demo`: the four services and the clock, a simulated fleet
# of 320 GPUs in racks and blocks, and three teams replaying a busy slice of the Microsoft ITP trace
# for about two minutes, shown live. Extra arguments go to `gangway demo` (see --help).
source "$(dirname "$0")/bootstrap.sh"
exec gangway demo "$@"
