"""A secret stored in the vault leaves every conversation turn of its user that said it, not
only the turns of the session it was stored from."""

from __future__ import annotations

from memos.memtypes import Episode, Fact, VaultItem

from memos import Scope

SECRET = "tq-5521-0098"


def said(text: str, session: str, agent: str = "bot") -> Episode:
    return Episode(summary=text, actor="user", event_type="message", session_id=session, agent_id=agent)


async def _turns(mem, user: str) -> dict[str, str]:
    """The user's turns by session/agent, each session's in one string."""
    await mem.storage.flush_queued()
    found: dict[str, list[str]] = {}
    for turn in await mem.list(Scope(user), "episodic", limit=None):
        found.setdefault(turn.session_id + "/" + turn.agent_id, []).append(turn.summary)
    return {key: " | ".join(sorted(texts)) for key, texts in found.items()}


async def test_an_item_vaulted_from_one_session_leaves_the_turns_of_the_others(mem):
    """A secret said in session s1 and vaulted from session s2 stayed in s1's turn: its text, its
    index and every prompt that recalled it."""
    await mem.add(Scope("alice", "bot", "s1"), said(f"my locker code is {SECRET}", "s1"))
    await mem.add(Scope("alice", "bot", "s1"), said("I like tea", "s1"))
    await mem.add(Scope("alice", "other", "s9"), said(f"the code {SECRET} again", "s9", agent="other"))
    await mem.add(Scope("bob", "bot", "s1"), said(f"bob's own {SECRET}", "s1"))
    [other] = await mem.add(Scope("alice", "bot"), Fact(subject="Gym", summary=f"The gym's wifi password is {SECRET}"))
    await mem.add(Scope("alice", "bot", "s2"), VaultItem(caption="Alice's locker code", secret=SECRET))
    turns = await _turns(mem, "alice")
    assert turns["s1/bot"].startswith("I like tea | my locker code is [vault item") and SECRET not in turns["s1/bot"]
    assert turns["s9/other"] == f"the code {SECRET} again"  # another agent's conversation: not this item's scope
    assert (await _turns(mem, "bob")) == {"s1/bot": f"bob's own {SECRET}"}  # another user's: never touched
    hits = await mem.search(SECRET, Scope("alice", "bot"), types=["episodic"])
    assert not [h for h in hits if SECRET in h.record.render() or "text_rank" in h.parts]
    assert (await mem.get(Scope("alice"), "semantic", other.id)).summary == other.summary  # not a turn: the user's own data
    assert not [e for e in await mem.history(Scope("alice", "bot")) if SECRET in str(e) and e.record_id != other.id]


async def test_an_item_stored_through_the_api_without_sources_leaves_the_users_turns(mem):
    """Stored with no source_ids for the user as a whole (the HTTP API, MCP), the item scrubbed no
    turn: the secret the user had said stayed in clear in their conversation."""
    await mem.add(Scope("alice", "bot", "s1"), said(f"my locker code is {SECRET}", "s1"))
    await mem.add(Scope("alice", "other", "s3"), said(f"code {SECRET}", "s3", agent="other"))
    await mem.add(Scope("alice"), VaultItem(caption="Alice's locker code", secret=SECRET))
    turns = await _turns(mem, "alice")
    assert turns and not [t for t in turns.values() if SECRET in t]
