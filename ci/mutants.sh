#!/usr/bin/env bash
# cargo-mutants (crates.io) over the code that guards memory: the
# remote-access check and key handling (mr/registry.rs), the cache's
# revocation of registrations whose memory changed (mr/cache/mod.rs), and the
# RMA target's checks of who sent a request (protocol/engine/rma_target.rs,
# peers.rs). Every mutant is built and the provider's Rust unit tests run
# against it (among them the engine's tests over the loopback and TCP
# wires); a mutant no test catches is listed in mutants.out/missed.txt,
# and each one is explained in the session note that ran it.
# ci/mutations.sh tries the seven hand-made mutations against both suites.
#
#   bash ci/mutants.sh                 # the functions below
#   bash ci/mutants.sh --list          # what would be tried (any extra
#                                      # cargo-mutants arguments pass on)
#
# Slow (a build and the unit tests per mutant: some 30-40 minutes here for
# about 90 mutants), so CI does not run it. Output: mutants.out/ (ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
files=(
	provider/src/mr/registry.rs
	provider/src/mr/cache/mod.rs
	provider/src/protocol/engine/rma_target.rs
	provider/src/protocol/engine/peers.rs
)
# (The functions that decide; not the copies, counters and answers around
# them, which the C suite and ci/mutations.sh exercise.)
funcs='Registry::check|AccessError::code|revoke_live|Cache::touched_since|Cache::touched_by_move|Cache::track_live|Engine::rma_target|Engine::request_is_its_senders|Engine::owns_its_queue'
args=()
for f in "${files[@]}"; do args+=(-f "$f"); done
exec cargo mutants --package oxmr "${args[@]}" -F "$funcs" --test-tool cargo \
	--cargo-test-arg=--lib --timeout-multiplier 3 --no-shuffle "$@"
