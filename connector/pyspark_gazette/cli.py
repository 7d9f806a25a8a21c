"""``pyspark-gazette``: the command line.

    pyspark-gazette quickstart [--rows N] [--keep] [--data-dir DIR] [--specs FILE]   # the main job
    pyspark-gazette broker --listen 127.0.0.1:8080 --data-dir DIR [--file-root DIR]
    pyspark-gazette journals list [-l SELECTOR] [--format table|yaml|json]
    pyspark-gazette journals apply -f specs.yaml [--dry-run]
    pyspark-gazette journals append -j JOURNAL [-f FILE]       # stdin by default
    pyspark-gazette journals read -j JOURNAL [--offset N] [--block]
    pyspark-gazette journals fragments -j JOURNAL [--signed]
    pyspark-gazette journals lag --checkpoint DIR               # a stream's backlog per journal
    pyspark-gazette doctor [-j JOURNAL] [-o KEY=VALUE] [--spark] # check a set-up as Spark will run it

The broker address comes from ``--broker.address``, else the ``BROKER_ADDRESS`` environment
variable (as Gazette's own tooling does), else ``http://localhost:8080``. A bearer token comes
from ``--broker.auth-token`` or ``BROKER_AUTH_TOKEN``; it is never printed. ``--log-config FILE``
(before the command) configures Python logging from a YAML/JSON dictConfig (``conf/logging.yaml``).

This module holds the argument parser of every subcommand and the broker connection; each
command's body is small and delegates to the client, the broker or the quickstart, and
``journals read``'s copy loop and its data-loss reports live in :mod:`pyspark_gazette.cli_read`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from pyspark_gazette.broker.main import broker_main
from pyspark_gazette.cli_read import copy_journal, exit_on_ctrl_c
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.client.specs import dump_specs, load_spec_file, spec_to_dict
from pyspark_gazette.errors import (
    BrokerUnreachableError,
    GazetteError,
    InvalidInputError,
    JournalNotFoundError,
)
from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.protocol import codec_name
from pyspark_gazette.protocol.auth import mint_token
from pyspark_gazette.protocol.durations import parse_duration
from pyspark_gazette.protocol.specs import spec_problems
from pyspark_gazette.quickstart import packaged_specs, run_quickstart
from pyspark_gazette.spark.options.table import BY_KEY

DEFAULT_ADDRESS = "http://localhost:8080"
#: ``--broker.timeout`` when not given: long enough for a broker restart or a route change (an
#: address where nothing ever answered fails sooner, by List's rule: ``Connections.unreachable``).
#: Shorter on purpose than the Spark option's default (5m): a person waits at the terminal, while a
#: Spark task failing would fail its whole job. The help says both.
DEFAULT_BROKER_TIMEOUT = "1m"


#: Capabilities a token minted from --broker.auth-keys grants, per journals command (as gazctl
#: signs its own per-call tokens with the keys).
_COMMAND_CAPS = {
    "list": "LIST",
    "apply": "APPLY|LIST",
    "append": "APPEND|LIST",
    "read": "READ|LIST",
    "lag": "READ|LIST",
}


def _auth_keys(args: argparse.Namespace) -> str | None:
    """Signing keys: --broker.auth-keys, else BROKER_AUTH_KEYS (Gazette's names)."""
    return getattr(args, "auth_keys", None) or os.environ.get("BROKER_AUTH_KEYS") or None


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token: --broker.auth-token / BROKER_AUTH_TOKEN, else one minted (1 hour, every
    journal, the command's capabilities) from --broker.auth-keys / BROKER_AUTH_KEYS, like gazctl."""
    token = args.auth_token or os.environ.get("BROKER_AUTH_TOKEN") or None
    keys = _auth_keys(args)
    if token or not keys:
        return token

    try:
        return mint_token(keys, _COMMAND_CAPS.get(args.journals_command, "READ|LIST"), None, ttl=3600)
    except ValueError as e:
        raise InvalidInputError(f"--broker.auth-keys: {e}") from None


def _client(args: argparse.Namespace):
    address = args.broker_address or os.environ.get("BROKER_ADDRESS") or DEFAULT_ADDRESS
    # Where the address came from, for an error saying nothing answered there.
    args.address_option = (
        "--broker.address"
        if args.broker_address
        else "BROKER_ADDRESS"
        if address != DEFAULT_ADDRESS
        else "the default --broker.address"
    )
    token = _token(args)
    try:
        config = ClientConfig(
            address,
            auth_token=token,
            file_root=args.file_root,
            direct_reads=bool(args.file_root),
            broker_timeout=_broker_timeout(args),
        )
    except ValueError as e:
        raise InvalidInputError(f"--broker.address: {e}") from None
    return JournalClient(config)


def _broker_timeout(args: argparse.Namespace) -> float | None:
    """``--broker.timeout`` in seconds (None: retry forever, for ``0``)."""
    try:
        seconds = parse_duration(args.broker_timeout, where="--broker.timeout")
    except ValueError as e:
        raise InvalidInputError(str(e)) from None
    if seconds < 0:
        raise InvalidInputError(f"--broker.timeout: {args.broker_timeout!r} is negative")
    return seconds or None


def _add_broker_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--broker.address", dest="broker_address", help="broker URL, or several comma-separated (env BROKER_ADDRESS)"
    )
    p.add_argument("--broker.auth-token", "--auth-token", dest="auth_token", help="bearer JWT (env BROKER_AUTH_TOKEN)")
    p.add_argument(
        "--broker.auth-keys",
        dest="auth_keys",
        help="base64 keys to sign a token with instead, as gazctl (env BROKER_AUTH_KEYS)",
    )
    p.add_argument("--file-root", help="local mount of the brokers' file:// stores, for direct fragment reads")
    p.add_argument(
        "--broker.timeout",
        dest="broker_timeout",
        default=DEFAULT_BROKER_TIMEOUT,
        help="how long to keep retrying while no broker answers (a broker down or restarting), e.g. 30s, 5m; "
        "then exit 1 (0 = forever; default %(default)s; the Spark option broker.timeout means the same for a task "
        f"and defaults to {BY_KEY['broker.timeout'].default}); an address where "
        "nothing has answered yet fails after about 7s",
    )


def cmd_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        infos = c.list_journals(args.selector or None)
    if args.format == "yaml":
        sys.stdout.write(dump_specs([(i.spec, i.mod_revision) for i in infos]) if infos else "")
    elif args.format == "json":
        print(json.dumps([spec_to_dict(i.spec, i.mod_revision) for i in infos], indent=2))
    else:
        rows = [("NAME", "CODEC", "LABELS", "REVISION")]
        for i in infos:
            labels = ",".join(f"{lb.name}={lb.value}" for lb in i.spec.labels.labels)
            rows.append((i.name, codec_name(i.spec.fragment.compression_codec), labels, str(i.mod_revision)))
        _table(rows)
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    nodes = load_spec_file(args.specs, "-f", stdin=sys.stdin)

    problems = [str(p) for n in nodes if not n.delete for p in spec_problems(n.spec)]
    if problems:
        # Every bad field of every spec at once (a broker reports only the first).
        raise InvalidInputError(
            f"-f {args.specs}: {len(problems)} problem(s), nothing applied:\n  " + "\n  ".join(problems)
        )
    changes = [
        Change(expect_mod_revision=n.revision or -1, delete=n.spec.name)
        if n.delete
        else Change(expect_mod_revision=n.revision, upsert=n.spec)
        for n in nodes
    ]
    if args.dry_run:
        for ch in changes:
            print(("delete " if ch.delete else "upsert ") + (ch.delete or ch.upsert.name))  # type: ignore[union-attr]
        return 0
    with _client(args) as c:
        revisions = c.apply_in_batches(changes)
    print(f"applied {len(changes)} change(s); revision {revisions[-1] if revisions else '-'}")
    return 0


def cmd_append(args: argparse.Namespace) -> int:
    with _client(args) as c:
        if args.file and args.file != "-":
            try:
                content: Any = open(args.file, "rb")
            except OSError as e:
                raise InvalidInputError(f"-f {args.file}: {e.strerror or e}") from None
        else:
            content = sys.stdin.buffer.read()
        try:
            # The client refuses content that leaves a line-framed journal's last message open.
            commit = c.append(args.journal, content)
        except InvalidInputError as e:
            raise InvalidInputError(f"journals append: {e}") from None
        finally:
            if not isinstance(content, bytes):
                content.close()
    print(f"appended [{commit.begin}, {commit.end}) to {commit.journal}", file=sys.stderr)
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    """Copy the journal to stdout. Content that cannot be read (a fragment missing from or damaged
    in its store, a hole the brokers skip over) is reported on stderr, one line per range naming
    the journal, the offsets and the fragment; the command then exits 1 at once, or with
    ``--fail-on-data-loss false`` goes on after the range and exits 0."""
    out = sys.stdout.buffer
    previous = exit_on_ctrl_c(out) if args.block else None
    try:
        return copy_journal(args, out, _client(args))
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGINT, previous)


def cmd_fragments(args: argparse.Namespace) -> int:
    with _client(args) as c:
        frags = c.list_fragments(args.journal, signature_ttl=60 if args.signed else None)
    rows = [("BEGIN", "END", "CODEC", "MOD_TIME", "STORE", "NAME")]
    for f in frags:
        ref = FragmentRef.from_proto(f.spec)
        rows.append(
            (
                str(ref.begin),
                str(ref.end),
                codec_name(ref.codec),
                _utc(ref.mod_time) if ref.mod_time else "-",
                ref.backing_store or "(local)",
                ref.content_path if not args.signed else f.signed_url or ref.content_path,
            )
        )
    _table(rows)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from pyspark_gazette import doctor

    options: dict[str, str] = {}
    for item in args.options or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"-o {item!r}: give KEY=VALUE, e.g. -o store.s3.endpoint=http://minio:9000")
        options[key.strip()] = value
    if args.broker_address:
        options["broker.address"] = args.broker_address
    token = _token(args)
    if token:
        options["broker.authToken"] = token
    if args.file_root:
        options["store.fileRoot"] = args.file_root
    options.setdefault("broker.timeout", args.broker_timeout)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each line as its check ends
    return doctor.run(options, args.journal, spark=args.spark)


def checkpoint_offsets(checkpoint: str, source: int = 0) -> tuple[int, dict[str, int]]:
    """The latest committed batch of a Spark streaming checkpoint and its end offsets for the
    ``source``-th source (``{journal: byte offset}``; a read-committed stream's entries are
    ``{"offset": ..., "producers": ...}``, of which the byte offset is taken)."""
    from pyspark_gazette.spark.read.committed import offset_of  # pyspark: only for this command

    root = pathlib.Path(checkpoint)
    try:
        done = [int(p.name) for p in (root / "commits").iterdir() if p.name.isdigit()]
    except OSError as e:
        raise InvalidInputError(f"--checkpoint {checkpoint}: {e.strerror or e} (not a streaming checkpoint?)") from None
    if not done:
        raise InvalidInputError(f"--checkpoint {checkpoint}: no committed batch yet")
    batch = max(done)
    lines = (root / "offsets" / str(batch)).read_text(encoding="utf-8").splitlines()
    # offsets/<batch>: a version line, the batch metadata, then one line per source.
    sources = lines[2:]
    if source >= len(sources) or sources[source] in ("", "-"):
        raise InvalidInputError(f"--checkpoint {checkpoint}: batch {batch} has no source {source}")
    try:
        offsets = json.loads(sources[source])
    except ValueError:
        offsets = None
    if not isinstance(offsets, dict) or not all(
        isinstance(v, int) or (isinstance(v, dict) and isinstance(v.get("offset"), int)) for v in offsets.values()
    ):
        raise InvalidInputError(f"--checkpoint {checkpoint}: source {source} of batch {batch} is not a gazette source")
    return batch, {journal: offset_of(entry) for journal, entry in offsets.items()}


def cmd_lag(args: argparse.Namespace) -> int:
    """Per journal: the end offset of the checkpoint's last committed batch, the write head, and
    the bytes between them (what the next batches have to read)."""
    batch, offsets = checkpoint_offsets(args.checkpoint, args.source)
    rows = [("JOURNAL", "COMMITTED", "WRITE_HEAD", "LAG_BYTES")]
    with _client(args) as c:
        for journal, committed in sorted(offsets.items()):
            head = max((f.spec.end for f in c.list_fragments(journal)), default=0)
            rows.append((journal, str(committed), str(head), str(max(0, head - committed))))
    print(f"batch {batch} of {args.checkpoint}")
    _table(rows)
    return 0


def _utc(seconds: int) -> str:
    """A persist time (Unix seconds) as ``2026-01-02T03:04:05Z``."""
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_token(args: argparse.Namespace) -> int:
    """Print a token signed with the first of the auth keys (the one thing this CLI prints a secret for)."""
    keys = _auth_keys(args)
    if not keys:
        raise InvalidInputError("token: give --auth-keys or set BROKER_AUTH_KEYS")
    try:
        ttl = parse_duration(args.ttl, where="--ttl")
        print(mint_token(keys, args.cap, args.selector or None, ttl=ttl))
    except ValueError as e:
        raise InvalidInputError(f"token: {e}") from None
    return 0


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def configure_logging(path: str) -> None:
    """Apply a logging dictConfig from a YAML or JSON file; errors name the file."""
    import logging.config

    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)  # JSON is YAML too
        logging.config.dictConfig(config)
    except (OSError, yaml.YAMLError, ValueError, TypeError, AttributeError, ImportError) as e:
        raise InvalidInputError(f"--log-config {path}: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyspark-gazette", description="Gazette journals for Spark, from the command line."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-config",
        help="Python logging configuration (YAML or JSON dictConfig, e.g. conf/logging.yaml); "
        "default: INFO on stderr (WARNING for the quickstart)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    q = sub.add_parser("quickstart", help="run the quickstart on an embedded broker (the README's main job)")
    q.add_argument(
        "--data-dir",
        help="where the broker, fragment store and checkpoints go, wiped at start "
        "(default $XDG_CACHE_HOME/pyspark-gazette/quickstart, else ~/.cache/pyspark-gazette/quickstart)",
    )
    q.add_argument(
        "--specs",
        help="YAML journal specs to use instead of the packaged ones; must define the ndjson journals "
        "quickstart/clicks and quickstart/checkouts",
    )
    q.add_argument("--print-specs", action="store_true", help="print the packaged journal specs (YAML) and exit")
    q.add_argument(
        "--rows", "--events", dest="rows", type=int, default=250_000, help="click events to write (default %(default)s)"
    )
    q.add_argument(
        "--keep",
        action="store_true",
        help="reuse the data directory of an earlier run (journals keep their content, ids continue, "
        "the stream resumes from its checkpoint) instead of wiping it",
    )

    b = sub.add_parser("broker", help="run the embedded Gazette-compatible broker", add_help=False)
    b.add_argument("broker_args", nargs=argparse.REMAINDER)

    t = sub.add_parser("token", help="mint a bearer token for a broker started with --auth-keys")
    t.add_argument("--auth-keys", "--broker.auth-keys", dest="auth_keys", help="base64 keys (env BROKER_AUTH_KEYS)")
    t.add_argument("--cap", default="READ|LIST", help="capabilities, e.g. 'READ|APPEND' or ALL (default %(default)s)")
    t.add_argument("-l", "--selector", help="journals covered, e.g. 'name:prefix=acme/' (default: all)")
    t.add_argument("--ttl", default="1h", help="lifetime, e.g. 15m, 24h (default %(default)s)")
    t.set_defaults(func=cmd_token)

    j = sub.add_parser("journals", help="list, apply, append to, read and inspect journals")
    jsub = j.add_subparsers(dest="journals_command", required=True)

    p = jsub.add_parser("list", help="list journals")
    _add_broker_flags(p)
    p.add_argument(
        "-l", "--selector", help="label selector, e.g. 'content-type=application/x-ndjson,name:prefix=examples/'"
    )
    p.add_argument("--format", choices=("table", "yaml", "json"), default="table")
    p.set_defaults(func=cmd_list)

    p = jsub.add_parser("apply", help="create, update or delete journals from a YAML spec file")
    _add_broker_flags(p)
    p.add_argument("-f", "--specs", required=True, help="YAML file of journal specs ('-' for stdin)")
    p.add_argument("--dry-run", action="store_true", help="print what would change")
    p.set_defaults(func=cmd_apply)

    p = jsub.add_parser("append", help="append a file (or stdin) atomically")
    _add_broker_flags(p)
    p.add_argument("-j", "--journal", required=True)
    p.add_argument("-f", "--file", help="file to append (default stdin)")
    p.set_defaults(func=cmd_append)

    p = jsub.add_parser("read", help="read a journal to stdout")
    _add_broker_flags(p)
    p.add_argument("-j", "--journal", required=True)
    p.add_argument(
        "--offset",
        type=int,
        default=0,
        help="start offset; -1 = the write head (nothing to read without --block); an offset beyond the write "
        "head is an error, and one inside a message starts at the next message, as in the Spark source",
    )
    p.add_argument(
        "--exact-offset",
        action="store_true",
        help="copy bytes from --offset as given, even from inside a message",
    )
    p.add_argument("--end-offset", type=int, default=0, help="stop before this offset (0 = no bound)")
    p.add_argument("--block", action="store_true", help="wait for new content instead of stopping at the write head")
    p.add_argument(
        "--fail-on-data-loss",
        choices=("true", "false"),
        default="true",
        help="on content that cannot be read (missing or damaged fragment, hole): report it on stderr and "
        "exit 1 (true, the default), or report it, skip it and go on (false), like Spark's failOnDataLoss",
    )
    p.set_defaults(func=cmd_read)

    p = jsub.add_parser("lag", help="bytes a streaming query's checkpoint is behind the journals' write heads")
    _add_broker_flags(p)
    p.add_argument("--checkpoint", required=True, help="the query's checkpointLocation (a local path)")
    p.add_argument("--source", type=int, default=0, help="which source of the query, in plan order (default 0)")
    p.set_defaults(func=cmd_lag)

    d = sub.add_parser(
        "doctor",
        help="check this set-up as Spark will run it: the workers' Python, Java, the broker, a journal, "
        "its store (direct reads), the C scanner",
        description="Check this set-up as Spark will run the connector: the Python Spark's workers will start "
        "(PYSPARK_PYTHON, else python3 from the PATH) imports the package, Java is 17+, the broker answers (with the "
        "auth given), a journal is listed, one persisted fragment of it can be read from its store from this "
        "machine, the C scanner is built. One line a check: ok, warn, or FAIL and what to do; exit 1 if a check "
        "failed.",
    )
    _add_broker_flags(d)
    d.set_defaults(journals_command="doctor", func=cmd_doctor)
    d.add_argument("-j", "--journal", help="the journal to check (default: the first the broker lists)")
    d.add_argument(
        "-o",
        "--option",
        dest="options",
        action="append",
        metavar="KEY=VALUE",
        help="a read option as given to Spark (e.g. -o store.s3.endpoint=http://minio:9000); repeatable",
    )
    d.add_argument(
        "--spark",
        action="store_true",
        help="also read one row of the journal through a local Spark session (slower: starts a JVM)",
    )

    p = jsub.add_parser("fragments", help="list a journal's fragments")
    _add_broker_flags(p)
    p.add_argument("-j", "--journal", required=True)
    p.add_argument("--signed", action="store_true", help="show signed URLs")
    p.set_defaults(func=cmd_fragments)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "broker":
        return broker_main(argv[1:], prog="pyspark-gazette broker")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except Exception as e:  # one line, not a traceback; -v shows the traceback
        if args.verbose:
            raise
        print(f"error: {one_line(e)} (-v shows the traceback)", file=sys.stderr)
        return 1


def one_line(e: BaseException) -> str:
    """An unexpected error as one line: its type and the first line of its message."""
    if isinstance(e, OSError) and e.strerror:
        where = f"{e.filename}: " if e.filename else ""
        return f"{where}{e.strerror}"
    text = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _explained(e: GazetteError, args: argparse.Namespace) -> GazetteError | str:
    """``e`` in the CLI's words: the flag an unreachable address came from; a missing journal with
    the closest existing name (as the Spark source suggests one)."""
    if isinstance(e, BrokerUnreachableError) and hasattr(args, "address_option"):
        return e.for_option(args.address_option, "--broker.timeout")
    if isinstance(e, JournalNotFoundError) and e.journal and hasattr(args, "address_option"):
        from pyspark_gazette.spark.resolve import did_you_mean

        with _client(args) as c:
            hint = " (or the token does not cover it)" if c.config.auth_token else ""
            hint += did_you_mean(c, e.journal)
        flag = "-j " if e.journal == getattr(args, "journal", None) else "journal "
        return f"{flag}{e.journal!r}: no such journal (JOURNAL_NOT_FOUND){hint}"
    return e


def _run(args: argparse.Namespace) -> int:

    try:
        if args.log_config:
            configure_logging(args.log_config)
        else:
            quiet = args.command == "quickstart"
            logging.basicConfig(
                level=logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO,
                format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            )
        if args.command == "quickstart":
            if args.print_specs:
                sys.stdout.write(packaged_specs())
                return 0
            return run_quickstart(data_dir=args.data_dir, rows=args.rows, keep=args.keep, specs=args.specs)
        return args.func(args)
    except GazetteError as e:
        print(f"error: {_explained(e, args)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our stdout went away (`| head`): stop quietly, and keep Python from
        # reporting the failed flush of stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0


if __name__ == "__main__":
    sys.exit(main())
