"""Decay: archives exactly the records whose retention score is below the threshold."""

from __future__ import annotations

from datetime import timedelta

from memos.memtypes import CoreBlock, Episode, Fact, Procedure, VaultItem

from memos.jobs.decay import DecayPolicy, plan_decay, retention_score


async def test_decay_archives_exactly_the_records_below_threshold(mem, clock, alice, bob):
    policy = DecayPolicy(threshold=0.15, half_life_days=30, min_age_days=7)
    old = [
        Fact(subject="alice", summary="said the weather was grey", importance=0.05),        # stale, trivial -> archived
        Episode(actor="alice", summary="ok", importance=0.0),                                 # stale, trivial -> archived
        Fact(subject="alice", summary="is allergic to peanuts", importance=0.9),              # important -> kept
        Fact(subject="alice", summary="uses vim", importance=0.05, access_count=10),          # often used -> kept
        Procedure(summary="reset the router", steps=["unplug"], importance=0.2),              # 0.079+0.09 = 0.169 -> kept
        CoreBlock(label="human", value="Alice", importance=0.0),                              # never decays
        VaultItem(caption="alice's bank pin", importance=0.0),                              # never decays
    ]
    await mem.add(alice, old)  # ids are kept; `old` stays in this order
    bob_old = await mem.add(bob, Fact(subject="bob", summary="said hi", importance=0.0))
    clock.advance(days=67)
    young = [Fact(subject="alice", summary="said it rained", importance=0.0)]  # low but only 3 days old
    await mem.add(alice, young)
    clock.advance(days=3)

    now = clock()
    every = [await mem.get(alice, r.memory_type, r.id) for r in [*old, *young]]  # as stored (created_at stamped)
    expected = {r.id for r in every if r.memory_type not in ("core", "vault") and retention_score(r, now, policy) < 0.15
                and now - r.created_at >= timedelta(days=7)}
    assert expected == {old[0].id, old[1].id}  # hand-checked: 0.4*2^(-70/30) + 0.45*0.05 = 0.102
    assert retention_score(every[4], now, policy) > 0.15 > retention_score(every[0], now, policy)

    sched = mem.scheduler(mode="manual")
    sched.add("decay", alice, every=timedelta(days=1), options={"threshold": 0.15, "min_age_days": 7})
    clock.advance(days=1)
    [result] = sched.run_due()
    assert result["archived"] == 2 and result["errors"] == [], result
    status = {}
    for name in ("semantic", "episodic", "procedural", "core", "vault"):
        status |= {r.id: r.status for r in await mem.list(alice, name, status=None)}
    assert {i for i, s in status.items() if s == "archived"} == expected
    assert status[old[5].id] == "active" and status[old[6].id] == "active"
    assert (await mem.get(bob, "semantic", bob_old[0].id)).status == "active"  # other scope untouched
    notes = [h.note for h in await mem.history(alice, old[0].id)]
    assert notes[-1].startswith("decayed (retention 0.1")
    sched.shutdown()


def test_plan_decay_never_touches_core_or_vault(clock):
    now = clock()
    stale = now - timedelta(days=400)
    records = [CoreBlock(label="persona", value="x", importance=0, created_at=stale),
               VaultItem(caption="pin", importance=0, created_at=stale),
               Fact(subject="x", summary="y", importance=0, created_at=stale)]
    assert [r[0] for r in plan_decay(records, now, DecayPolicy(threshold=0.99))] == ["semantic"]


async def test_bad_job_options_are_recorded_as_a_failed_run(mem, clock, alice):
    from memos.jobs.runs import job_history, run_job

    outcome = await run_job(mem, "decay", alice, options={"half_life_days": -1})
    assert outcome["errors"] and "half-life" in outcome["errors"][0]
    [run] = await job_history(mem, alice, kind="decay")
    assert run["note"] == "failed"
