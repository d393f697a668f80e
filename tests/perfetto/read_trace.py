"""Reads a Perfetto trace with Perfetto's own messages (the `perfetto`
package's generated `perfetto_trace_pb2`, as `cargo xtask setup` installs
it) and prints what a viewer takes from it as one JSON object: the
process and thread tracks, and each track's events in order with names,
categories and arguments resolved (interned ones included).

Exits 1 with one line on stderr when the file is not what a viewer can
rely on: a field Perfetto's messages do not know (an unknown field after
parsing), a packet outside a sequence, a sequence not cleared first, an
interned id no packet defines, an event on a track never described, a
thread track under no process track of its pid, a clock no snapshot
relates, times going back on a track, or slices that do not nest.

Usage: python3 read_trace.py TRACE
"""

import json
import sys

from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SEQ_INCREMENTAL_STATE_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
TYPES = {
    pb.TrackEvent.TYPE_SLICE_BEGIN: "begin",
    pb.TrackEvent.TYPE_SLICE_END: "end",
    pb.TrackEvent.TYPE_INSTANT: "instant",
}


class Bad(Exception):
    """The trace breaks what a viewer relies on."""


def unknown(msg, path):
    """Raises on the first field of `msg` (or a message in it) that
    Perfetto's messages do not declare."""
    found = unknown_fields.UnknownFieldSet(msg)
    if len(found):
        numbers = sorted({f.field_number for f in found})
        raise Bad(f"{path}: fields {numbers} are unknown to Perfetto's {msg.DESCRIPTOR.full_name}")
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        if field.is_repeated:
            for i, v in enumerate(value):
                unknown(v, f"{path}.{field.name}[{i}]")
        else:
            unknown(value, f"{path}.{field.name}")


def interned(sequences, seq, table, iid):
    """The interned string `iid` of `table` on sequence `seq`."""
    names = sequences[seq]["interned"].get(table, {})
    if iid not in names:
        raise Bad(f"sequence {seq}: interned {table} id {iid} is defined by no packet before it")
    return names[iid]


def read(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    unknown(trace, "trace")
    sequences = {}
    clocks = {}
    tracks = {}
    events = []
    for n, p in enumerate(trace.packet):
        if not p.HasField("trusted_packet_sequence_id"):
            raise Bad(f"packet {n} belongs to no sequence (trusted_packet_sequence_id)")
        seq = p.trusted_packet_sequence_id
        if seq not in sequences:
            if not p.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
                raise Bad(f"sequence {seq} does not begin with SEQ_INCREMENTAL_STATE_CLEARED")
            sequences[seq] = {"interned": {}, "packets": 0}
        if p.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
            sequences[seq]["interned"] = {}
        sequences[seq]["packets"] += 1
        if p.HasField("interned_data"):
            for field, entries in p.interned_data.ListFields():
                table = sequences[seq]["interned"].setdefault(field.name, {})
                for e in entries:
                    fields = e.DESCRIPTOR.fields_by_name
                    table[e.iid] = e.name if "name" in fields else e.str.decode(errors="replace")
        if p.HasField("clock_snapshot"):
            for c in p.clock_snapshot.clocks:
                clocks[c.clock_id] = c.timestamp
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            t = {"uuid": d.uuid, "name": d.name if d.HasField("name") else None}
            if d.HasField("parent_uuid"):
                t["parent"] = d.parent_uuid
            if d.HasField("process"):
                t["process"] = {"pid": d.process.pid, "name": d.process.process_name}
            if d.HasField("thread"):
                th = d.thread
                t["thread"] = {"pid": th.pid, "tid": th.tid, "name": th.thread_name}
            if d.uuid in tracks:
                raise Bad(f"track {d.uuid} is described twice")
            tracks[d.uuid] = t
        if p.HasField("track_event"):
            e = p.track_event
            if not p.HasField("timestamp"):
                raise Bad(f"packet {n}: a track event without a time")
            clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else 6
            name = e.name if e.HasField("name") else None
            if e.HasField("name_iid"):
                name = interned(sequences, seq, "event_names", e.name_iid)
            categories = list(e.categories) + [
                interned(sequences, seq, "event_categories", i) for i in e.category_iids
            ]
            args = {}
            for a in e.debug_annotations:
                key = a.name if a.HasField("name") else interned(
                    sequences, seq, "debug_annotation_names", a.name_iid)
                which = a.WhichOneof("value")
                args[key] = getattr(a, which) if which else None
            events.append({
                "packet": n,
                "sequence": seq,
                "clock": clock,
                "ts": p.timestamp,
                "type": TYPES.get(e.type, str(e.type)),
                "track": e.track_uuid,
                "name": name,
                "categories": categories,
                "args": args,
            })
    by_track = {}
    for e in events:
        if e["clock"] not in clocks:
            raise Bad(f"packet {e['packet']}: clock {e['clock']} is in no clock snapshot")
        if e["track"] not in tracks:
            raise Bad(f"packet {e['packet']}: track {e['track']} is never described")
        by_track.setdefault(e["track"], []).append(e)
    for uuid, t in tracks.items():
        if "thread" in t:
            parent = tracks.get(t.get("parent"))
            if parent is None or parent.get("process", {}).get("pid") != t["thread"]["pid"]:
                raise Bad(f"thread track {uuid} is not under its process's track")
    for uuid, evs in by_track.items():
        depth = 0
        for a, b in zip(evs, evs[1:]):
            if b["ts"] < a["ts"]:
                raise Bad(f"track {uuid}: time goes back from {a['ts']} to {b['ts']}")
        for e in evs:
            depth += {"begin": 1, "end": -1}.get(e["type"], 0)
            if depth < 0:
                raise Bad(f"track {uuid}: a slice ends that never began (packet {e['packet']})")
        if depth:
            raise Bad(f"track {uuid}: {depth} slices never end")
    return {
        "clocks": {str(k): v for k, v in clocks.items()},
        "sequences": {str(k): v["packets"] for k, v in sequences.items()},
        "tracks": [
            dict(t, events=by_track.get(uuid, [])) for uuid, t in tracks.items()
        ],
    }


def main():
    if len(sys.argv) != 2:
        print("usage: read_trace.py TRACE", file=sys.stderr)
        return 2
    try:
        out = read(sys.argv[1])
    except Bad as e:
        print(f"read_trace.py: {e}", file=sys.stderr)
        return 1
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
