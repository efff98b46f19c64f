"""Whose user mappings a staged config.json has: scrun.lua's own (the node's runtime
makes that namespace as the plain user) or podman's (the node makes podman's namespace
again for the runtime to run in)."""

from __future__ import annotations

from pyscrun.anchor.staging import own_user_mappings

PODMANS = {"linux": {"namespaces": [{"type": "user"}, {"type": "mount"}],
                     "uidMappings": [{"containerID": 0, "hostID": 1, "size": 1000}]}}
LUAS = {"linux": {"namespaces": [{"type": "mount"}, {"type": "user"}],
                  "uidMappings": [{"containerID": 0, "hostID": 1001, "size": 1}]}}
PLAIN = {"linux": {"namespaces": [{"type": "mount"}]}}


def test_mappings_scrun_lua_wrote_are_its_own() -> None:
    assert own_user_mappings(LUAS, PLAIN)
    assert own_user_mappings(LUAS, PODMANS)


def test_mappings_podman_wrote_are_not() -> None:
    assert not own_user_mappings(PODMANS, PODMANS)
    assert not own_user_mappings(PLAIN, PLAIN)
    assert not own_user_mappings(PLAIN, PODMANS)


def test_without_a_user_namespace_or_a_document_there_are_none() -> None:
    no_namespace = {"linux": {"namespaces": [{"type": "mount"}],
                              "uidMappings": LUAS["linux"]["uidMappings"]}}
    assert not own_user_mappings(no_namespace, PLAIN)
    assert not own_user_mappings("not a document", PLAIN)
    assert not own_user_mappings({"linux": "no"}, PLAIN)
