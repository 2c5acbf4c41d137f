"""Which node of which cluster a data directory belongs to: `DATA_DIR/node.json`, checked at every start.

A node's WAL holds acknowledged records that may not be in any object yet. At start the node restores them for
the partitions its metadata says it owns, and lets the WAL go past the others (records of a partition failed
over to another node, which recovered them). Started once on the same data directory with another `--node-id`
or another `--metadata` (a typo, a forgotten flag: a fresh metadata database knows no partition), it would let
every record of the WAL go, and the right start after that would find them gone. So the first start writes the
directory's node id and the cluster's id (a random id the metadata database keeps, made by the first node that
starts on it), and every later start with another node id or another cluster is refused before anything is
read or written, naming both.

A data directory of an earlier version (no `node.json`) is taken as it is, at its first start.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from broker.metadata import MetadataClient
from storage_tier.durability import fsync_dir

IDENTITY_FILE = "node.json"
#: the metadata KV key of the cluster's id
CLUSTER_ID_KEY = "cluster_id"


class DataDirMismatch(RuntimeError):
    """The data directory belongs to another node id or another cluster than the start asks for."""


def shown_metadata(url: str) -> str:
    """The metadata URL without what may be secret (user, password, query parameters other than `schema`)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    schema = parse_qs(parts.query).get("schema")
    return f"{parts.scheme}://{host}{parts.path}" + (f"?schema={schema[0]}" if schema else "")


def check_identity(data_dir: Path, meta: MetadataClient, node_id: int) -> None:
    """Refuse (DataDirMismatch) a start of `node_id` on `meta`'s cluster over a data directory written by another
    node id or cluster; record them at a first start."""
    # read first: only the first start on a metadata database writes (a transaction at every start otherwise)
    cluster_id = meta.kv_get(CLUSTER_ID_KEY) or meta.kv_put_if_absent(CLUSTER_ID_KEY, uuid.uuid4().hex)
    path = data_dir / IDENTITY_FILE
    if not path.exists():
        _write(path, {"v": 1, "node_id": node_id, "cluster_id": cluster_id, "metadata": shown_metadata(meta.url)})
        return
    try:
        doc = json.loads(path.read_text())
        was_node, was_cluster, was_metadata = int(doc["node_id"]), str(doc["cluster_id"]), str(doc["metadata"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"{path} is damaged ({exc}): it says which node and cluster the data directory "
                           "belongs to; restore it, or start on another data directory (--data-dir)") from None
    if was_node == node_id and was_cluster == cluster_id:
        return
    what = []
    if was_node != node_id:
        what.append(f"it is node {was_node}'s, not node {node_id}'s (--node-id)")
    if was_cluster != cluster_id:
        what.append(f"it belongs to the cluster of --metadata {was_metadata}, not to that of "
                    f"--metadata {shown_metadata(meta.url)} (cluster id {was_cluster}, not {cluster_id})")
    raise DataDirMismatch(
        f"the data directory {data_dir} {' and '.join(what)}: its WAL may hold acknowledged records only that node "
        f"of that cluster restores, so nothing was started. Start with --node-id {was_node} and --metadata "
        f"{was_metadata}, or give this node another data directory (--data-dir). Only if that cluster's "
        f"metadata is gone for good: remove {path}, and the records of its WAL that no upload reached are dropped")


def _write(path: Path, doc: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(doc, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
