"""Counter-based random streams: a published generator, one draw equal to the same draw in a batch, and
streams that do not depend on which other clients exist or in which order they draw."""
from __future__ import annotations

import numpy as np
import pytest
import simpy
from scipy import stats

from fedsim import scenario_from_mapping
from fedsim.sim.rng import Streams, counter_normals, splitmix64
from fedsim.sim.trace import Trace
from fedsim.system.world import World

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

# Published SplitMix64 outputs (Vigna's splitmix64.c; the Rosetta Code task "Pseudo-random numbers/Splitmix64")
REFERENCE = {
    1234567: [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431,
              16408922859458223821],
    0: [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC, 0x1B39896A51A8749B],
}


@pytest.mark.parametrize("seed", list(REFERENCE))
def test_splitmix64_gives_the_reference_outputs_one_at_a_time_and_as_arrays(seed):
    want = REFERENCE[seed]
    assert [splitmix64(seed, i) for i in range(5)] == want
    got = splitmix64(np.uint64(seed), np.arange(5, dtype=np.uint64))
    assert got.dtype == np.uint64 and got.tolist() == want


def test_one_draw_equals_the_same_draw_in_a_batch_bit_for_bit():
    rng = np.random.default_rng(0)
    key = int(rng.integers(0, 2**63, dtype=np.uint64)) * 2 + 1
    members = np.concatenate([rng.integers(0, 2**40, 20_000, dtype=np.uint64),
                              np.array([0, 1, 2**63, 2**64 - 1], dtype=np.uint64)])
    counters = np.concatenate([rng.integers(0, 2**20, 20_000, dtype=np.uint64),
                               np.array([0, 2**64 - 1, 7, 2**63], dtype=np.uint64)])
    batch = counter_normals(key, members, counters)
    one = np.array([counter_normals(key, int(m), int(c)) for m, c in zip(members.tolist(), counters.tolist())])
    assert batch.dtype == np.float64 and np.isfinite(batch).all()
    assert batch.tobytes() == one.tobytes()


def test_draws_are_standard_normal_and_independent_across_members_and_counters():
    fam = Streams(2024).counter("jitter")
    members, counters = np.meshgrid(np.arange(400), np.arange(100))
    z = fam.normals(members.ravel(), counters.ravel())
    assert stats.kstest(z, stats.norm.cdf).pvalue > 1e-3
    grid = z.reshape(100, 400)
    # neighbouring members and neighbouring counters are uncorrelated
    assert abs(np.corrcoef(grid[:, :-1].ravel(), grid[:, 1:].ravel())[0, 1]) < 0.02
    assert abs(np.corrcoef(grid[:-1].ravel(), grid[1:].ravel())[0, 1]) < 0.02


def test_a_family_key_depends_on_the_seed_and_the_name_only():
    assert Streams(5).counter("jitter").key == Streams(5).counter("jitter").key
    keys = {Streams(5).counter("jitter").key, Streams(6).counter("jitter").key, Streams(5).counter("other").key,
            Streams(5).counter("jitter", 1).key}
    assert len(keys) == 4
    # a counter family is not one of the sequential streams of the same name
    assert Streams(5).counter("jitter").key != int(Streams(5).seed_sequence("jitter").generate_state(1, np.uint64)[0])


def _world(n: int, jitter: float = 0.3, seed: int = 11) -> World:
    sc = scenario_from_mapping({"seed": seed, "stop": {"max_versions": 1},
                                "devices": {"mix": [{"profile": "jetson-nano", "weight": 1},
                                                    {"profile": "raspberry-pi-4", "weight": 1}], "jitter": jitter}})
    return World.from_scenario(simpy.Environment(), Streams(sc.seed), Trace(None), n, sc)


def test_adding_a_client_or_reordering_tasks_shifts_no_other_clients_jitter():
    small, large = _world(10), _world(11)
    times_small = {(c, k): small.compute_seconds(c, 1e9) for k in range(3) for c in range(10)}
    # the larger world draws in another order (client-major, newest client first) and has one more client
    times_large = {(c, k): large.compute_seconds(c, 1e9) for c in reversed(range(11)) for k in range(3)}
    for key, t in times_small.items():
        assert times_large[key] == t, key
    assert len({round(t, 9) for t in times_small.values()}) == len(times_small)  # jitter really varies


def test_batched_compute_times_equal_one_at_a_time():
    one, many = _world(50), _world(50)
    clients = np.array([3, 17, 0, 42, 8, 49])
    flops = np.linspace(1e8, 5e9, len(clients))
    samples = np.full(len(clients), 64)
    for _ in range(3):  # each call advances every client's task counter
        a = np.array([one.compute_seconds(int(c), float(f), samples=64) for c, f in zip(clients, flops)])
        b = many.compute_seconds_many(clients, flops, samples)
        assert a.tobytes() == b.tobytes()


def test_int_seed_and_family_keys_are_numpys_seed_sequence_bit_for_bit():
    """``int_seed`` and a counter family's key compute SeedSequence's first 64 bits in plain integer steps:
    equal to numpy's own SeedSequence on seeds of one to five 32-bit words (over four words numpy's is
    used) and on spawn words at their edges; a changed constant in the written-out mixing would fail here."""
    from fedsim.sim.rng import _name_key, _state64

    rng = np.random.default_rng(11)
    seeds = [0, 1, 2**31, 2**32 - 1, 2**32, 2**64 - 1, 2**96 + 5, 2**128 - 1, 2**128, 2**150 + 3]
    seeds += [int(v) for v in rng.integers(0, 2**63, size=200)]
    edges = [0, 1, 2**31, 2**32 - 1]
    for i, seed in enumerate(seeds):
        key = [edges[(i + j) % 4] if i % 3 == 0 else int(w) for j, w in enumerate(rng.integers(0, 2**32, size=4))]
        want = int(np.random.SeedSequence(entropy=seed, spawn_key=tuple(key)).generate_state(1, dtype=np.uint64)[0])
        assert _state64(seed, key) == want, (seed, key)
    s = Streams(2**40 + 7)
    name = ("client", 12, "task", 3)
    assert s.int_seed(*name) == int(s.seed_sequence(*name).generate_state(1, dtype=np.uint64)[0]) & (2**63 - 1)
    assert s.counter("jitter").key == int(s.seed_sequence("counter", "jitter").generate_state(1, dtype=np.uint64)[0])
    assert _name_key(name) == list(s.seed_sequence(*name).spawn_key)
