"""A user's own data as the records the job reads: ``{"id", "features": [floats], "label"}``.

:class:`RecordReader` turns a source — a CSV file with a header, a JSON Lines file (one
object per line), standard input (``-``), one of river's bundled datasets or seeded
generators (``river:Phishing``, ``river:synth.Agrawal``), or a bundled array data set
(``shuttle``, ``digits``) — into records, and every row it cannot use into a
:class:`BadRow` (``line N: reason``) instead of an exception. A categorical column (a
city, a merchant, a letter code) becomes a fixed number of one-hot features by feature
hashing (:func:`bucket`), so that a stream's records keep one width however many values
it brings. :func:`write_stream` routes
records to ``training`` / ``forecasting``, packs them into messages and paces them; it
takes the sending function as an argument, so none of this needs Kafka.
"""

from __future__ import annotations

import csv
import inspect
import io  # the doctest reads from an io.StringIO
import itertools
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TextIO

import orjson

__all__ = ["BadRow", "RecordReader", "StreamSummary", "write_stream", "bucket", "FORMATS",
           "BUNDLED", "DEFAULT_GENERATOR_LIMIT", "MAX_BUCKETS"]

FORMATS = ("csv", "jsonl")
#: the array data sets a source may name: ``NAME-drift`` is learning.datasets.drift(NAME)
BUNDLED = ("shuttle", "digits", "agrawal-drift", "sea-drift", "sine-drift")
#: records of a bundled drift stream without --limit (learning.datasets.drift: the concept
#: changes around 2/5 of them, over 1/10)
DRIFT_RECORDS = 20_000
DEFAULT_GENERATOR_LIMIT = 10_000  # records, for an endless river generator without --limit
SNIFF_ROWS = 100  # rows read ahead to choose the default feature columns
MAX_BUCKETS = 1 << 16  # one-hot features of one categorical column, at most
#: distinct values of one categorical column remembered to count them and their shared
#: buckets (:attr:`RecordReader.values`); past it new values are hashed, not counted
MAX_COUNTED_VALUES = 100_000


@dataclass(frozen=True)
class BadRow:
    """A row that was skipped: ``line`` is 1-based in the input file (the CSV header is
    line 1), or the record number for a source without lines."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


def _number(text: str) -> float | None:
    """``text`` as a finite float, or None."""
    try:
        x = float(text)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _decimal_comma(text: str) -> float | None:
    """``text`` as a finite float, reading one comma as the decimal separator (``1,5``: what
    spreadsheet programs write, with ``;`` between cells, where the comma is the decimal
    separator), or None."""
    x = _number(text)
    if x is None and text.count(",") == 1 and "." not in text:
        x = _number(text.replace(",", "."))
    return x


def bucket(column: str, value: str, buckets: int) -> int:
    """The one-hot position, in ``range(buckets)``, of a categorical column's value: where
    scikit-learn's ``FeatureHasher(n_features=buckets, input_type="string",
    alternate_sign=False)`` puts the string ``"column=value"`` (the signed 32-bit
    MurmurHash3 of its UTF-8 bytes, seed 0, in absolute value modulo ``buckets``; Weinberger
    et al. 2009, "Feature hashing for large scale multitask learning"). The same on every
    machine and in every process (unlike Python's ``hash``), so that training and
    forecasting records, and a user's own code, agree. Two values may share a bucket: take
    a few times more buckets than the column has values.

    >>> bucket("city", "Paris", 16), bucket("city", "Rome", 16)
    (1, 7)
    """
    from sklearn.utils import murmurhash3_32

    h = murmurhash3_32(f"{column}={value}", seed=0)
    if h == -2 ** 31:  # as scikit-learn: abs() would overflow its int32
        return (2 ** 31 - 1 - (buckets - 1)) % buckets
    return abs(h) % buckets


def _category(value: Any) -> str | None:
    """A JSON or river value of a categorical column as its text: a string as it is, a
    number or a bool as JSON writes it (``1``, ``1.5``, ``true``); None for a missing
    one (no bucket set).

    Raises
    ------
    TypeError
        For a list or an object.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return orjson.dumps(value).decode()
    if hasattr(value, "item"):  # a numpy scalar (river)
        return _category(value.item())
    raise TypeError(f"{type(value).__name__}")


def _feature(value: Any) -> float | None:
    """A JSON / river value as a finite float, or None (bools and strings are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    x = float(value)
    return x if math.isfinite(x) else None


def _numeric_columns(rows: list[dict], exclude: tuple, present_only: bool = False) -> list[str]:
    """The keys (in order of first appearance) whose value is a number in more than half
    of ``rows``, so that one bad row among the first does not drop a column; with
    ``present_only``, of the rows that have the key (a missing value abstains)."""
    votes: dict[str, int] = {}
    seen: dict[str, int] = {}
    for row in rows:
        for k, v in row.items():
            if k not in exclude:
                votes[k] = votes.get(k, 0) + (v is not None)
                seen[k] = seen.get(k, 0) + 1
    return [k for k, n in votes.items() if 2 * n > (seen[k] if present_only else len(rows))]


#: the feature columns of JSON Lines objects that are the job's own records: each object's
#: ``features`` array, taken as it is (compared by identity)
VECTOR: tuple = ("features",)


def _delimiter(header: str) -> str:
    """The CSV delimiter a header line uses: whichever of ``,``, ``;``, tab and ``|`` it
    holds most of (``,`` when it holds none; spreadsheet programs write ``;`` where the
    decimal separator is a comma)."""
    counts = [(header.count(d), d) for d in ",;\t|"]
    n, d = max(counts, key=lambda c: c[0])
    return d if n else ","


def _without_bom(f: Iterable[str]) -> Iterator[str]:
    """The lines of ``f``, the first without the byte order mark that spreadsheet programs
    write at the start of a UTF-8 file (else it stays in the first column's name, and
    ``--label`` naming that column finds no such column)."""
    lines = iter(f)
    first = next(lines, None)
    if first is not None:
        yield first.removeprefix("\ufeff")
        yield from lines


def _scalar(text: str, number: Callable[[str], float | None] | None = None) -> int | float | str:
    """A CSV cell as the JSON value it spells: an int, else a float (read by ``number``,
    :func:`_number` by default), else the string."""
    try:
        return int(text)
    except ValueError:
        pass
    x = (number or _number)(text)
    return x if x is not None else text


class RecordReader:
    """Reads one source and yields records (dicts) or :class:`BadRow`.

    Parameters
    ----------
    source : str
        A path ending in ``.csv`` or ``.jsonl``/``.json``/``.ndjson``, ``-`` for standard
        input, ``river:NAME`` (a class of ``river.datasets`` or ``river.datasets.synth``
        that needs no download), or ``shuttle`` / ``digits``.
    format : {"csv", "jsonl"} or None
        Format of a file or of standard input; None: by the file's suffix, csv for stdin.
    label : str or None
        Label column; None: ``label`` if the data has one, else the records are unlabelled.
        Tabular sources only (river and bundled data carry their own target).
    id : str or None
        Id column; None: ``id`` if the data has one, else the row number (``first_id`` +
        0-based data row, counting skipped rows, so ids do not shift when a row is bad).
        Tabular sources only.
    features : list of str or None
        Feature columns, in order; None: every column but the label and the id whose value
        is a number in more than half of the first :data:`SNIFF_ROWS` rows (for river: every
        numeric key of the first record). JSON Lines objects that are the job's own records
        (a ``features`` array in more than half of them) keep their array as it is.
    seed : int or None
        Seed of a river generator (passed to its ``seed`` argument).
    limit : int or None
        Stop after this many records (bad rows do not count). An endless river generator
        defaults to :data:`DEFAULT_GENERATOR_LIMIT`.
    first_id : int
        Id of the first row when ids are row numbers.
    stdin : text stream or None
        Read instead of ``sys.stdin`` for ``-`` (tests).
    delimiter : str or None
        CSV delimiter; None: whichever of ``,``, ``;``, tab and ``|`` the header line holds
        most of. With ``;`` a number may have a decimal comma (``1,5``).
    missing : collection of str or None
        The CSV cell texts (stripped) that mean a missing value, e.g. ``{"", "NA", "?"}``:
        such a feature is written as ``null``, as is a JSON Lines ``null`` or absent
        feature and a river record's None, for a pipeline whose first preprocessor imputes
        them (``StatImputer``); None: a row with one is bad, as any non-number.
    categorical : mapping of str to int or None
        Categorical columns (CSV) or keys (JSON Lines, river) → their number of buckets,
        2 to :data:`MAX_BUCKETS`: each becomes that many one-hot features (1.0 in the
        value's :func:`bucket`, 0.0 elsewhere; all 0.0 for an empty cell, a ``missing``
        token, a JSON null or an absent key), after the numeric features, in the order
        given. They are not numeric feature columns.

    Attributes
    ----------
    columns : list of str or None
        A tabular source's feature columns, once the first record was read (None before,
        and for the job's own JSON Lines records, river and bundled data).
    left_out : list of str
        The other columns (neither the label nor the id nor categorical), e.g. the
        non-numeric ones.
    values, shared : dict of str to int
        Per categorical column, the distinct values read so far (up to
        :data:`MAX_COUNTED_VALUES`), and how many of them fell in a bucket an earlier
        value had set (then the learner cannot tell the two apart: take more buckets).

    Raises
    ------
    ValueError
        On an unknown format, river name, a river dataset that needs a download, a seed for
        a source that takes none, ``label``/``id`` for a non-tabular source, ``limit < 0``,
        a delimiter that is not one character, or a missing file, a categorical column
        for bundled data, that is also a feature column, the label or the id, or with
        buckets outside 2 to :data:`MAX_BUCKETS`; while reading, for a
        ``label``/``id``/``features``/categorical column that is not there (CSV), or when
        no column is a number in most of the first :data:`SNIFF_ROWS` rows and neither
        ``features`` nor ``categorical`` is given.

    Examples
    --------
    >>> rows = io.StringIO("a,b,label\\n1,2,x\\n3,oops,y\\n5,6,x\\n")
    >>> for item in RecordReader("-", stdin=rows):
    ...     print(item)
    {'id': 0, 'features': [1.0, 2.0], 'label': 'x'}
    line 3: feature 'b' is not a finite number: 'oops'
    {'id': 2, 'features': [5.0, 6.0], 'label': 'x'}
    >>> rows = io.StringIO("a,b,label\\n1,2,x\\n3,NA,y\\n5,,x\\n")
    >>> for item in RecordReader("-", stdin=rows, missing={"", "NA"}):
    ...     print(item)
    {'id': 0, 'features': [1.0, 2.0], 'label': 'x'}
    {'id': 1, 'features': [3.0, None], 'label': 'y'}
    {'id': 2, 'features': [5.0, None], 'label': 'x'}
    >>> rows = io.StringIO("a,city,label\\n1,Paris,x\\n3,Rome,y\\n")
    >>> for item in RecordReader("-", stdin=rows, categorical={"city": 4}):
    ...     print(item)
    {'id': 0, 'features': [1.0, 0.0, 1.0, 0.0, 0.0], 'label': 'x'}
    {'id': 1, 'features': [3.0, 0.0, 0.0, 0.0, 1.0], 'label': 'y'}
    """

    def __init__(self, source: str, *, format: str | None = None, label: str | None = None,
                 id: str | None = None, features: list[str] | None = None,
                 seed: int | None = None, limit: int | None = None, first_id: int = 0,
                 stdin: TextIO | None = None, delimiter: str | None = None,
                 missing: Iterable[str] | None = None,
                 categorical: dict[str, int] | None = None) -> None:
        self.source = source
        self.format = format
        self.label = label
        self.id = id
        self.features = features
        self.seed = seed
        self.limit = limit
        self.first_id = first_id
        self.stdin = stdin
        self.delimiter = delimiter
        self.missing = None if missing is None else frozenset(t.strip() for t in missing)
        self.categorical = dict(categorical or {})
        self.values = dict.fromkeys(self.categorical, 0)
        self.shared = dict.fromkeys(self.categorical, 0)
        self._buckets: dict[str, dict[str, int]] = {c: {} for c in self.categorical}
        self._taken: dict[str, set[int]] = {c: set() for c in self.categorical}
        for c, k in self.categorical.items():
            if not (isinstance(k, int) and 2 <= k <= MAX_BUCKETS):
                raise ValueError(f"categorical column {c!r}: buckets must be an integer in "
                                 f"[2, {MAX_BUCKETS}], got {k!r}")
            if c in (features or ()):
                raise ValueError(f"column {c!r} cannot be categorical and also a feature "
                                 "column")
        self._not_categorical(label, id)
        self.columns: list[str] | None = None  # the feature columns, once chosen
        self.left_out: list[str] = []  # other columns, not the label's or the id's
        if delimiter is not None and len(delimiter) != 1:
            raise ValueError(f"the delimiter must be one character, got {delimiter!r}")
        if format is not None and format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self.kind = self._kind()
        if self.kind == "bundled" and self.categorical:
            raise ValueError(f"{source!r} has no categorical columns")
        if self.kind in ("river", "bundled") and (label is not None or id is not None):
            raise ValueError(f"--label and --id apply to CSV / JSON Lines input, not {source!r}")
        if seed is not None and self.kind != "river" and not (
                self.kind == "bundled" and source.endswith("-drift")):
            raise ValueError(f"--seed applies to river generators, not {source!r}")
        if self.kind in FORMATS and source != "-" and not Path(source).is_file():
            raise ValueError(f"no such file: {source!r}")
        self._dataset = self._river() if self.kind == "river" else None

    def _not_categorical(self, label: str | None, id_: str | None) -> None:
        """Raise ValueError where the label or the id column is also categorical."""
        both = [c for c in (label, id_) if c is not None and c in self.categorical]
        if both:
            raise ValueError(f"column {both[0]!r} cannot be categorical and also the label "
                             "or the id")

    def _one_hot(self, value_of: Callable[[str], Any]) -> list[float]:
        """The one-hot features of a row's categorical columns, ``value_of(column)`` giving
        each one's value (None: missing, all 0.0).

        Raises
        ------
        TypeError
            For a value that is a list or an object, naming the column.
        """
        out: list[float] = []
        for c, k in self.categorical.items():
            hot = [0.0] * k
            try:
                text = _category(value_of(c))
            except TypeError as exc:
                raise TypeError(f"categorical feature {c!r} is a {exc}, not a scalar") from None
            if text is not None:
                known = self._buckets[c]
                b = known.get(text)
                if b is None:
                    b = bucket(c, text, k)
                    if len(known) < MAX_COUNTED_VALUES:
                        known[text] = b
                        self.values[c] += 1
                        taken = self._taken[c]
                        self.shared[c] += b in taken
                        taken.add(b)
                hot[b] = 1.0
            out.extend(hot)
        return out

    def _is_missing(self, cell: str) -> bool:
        """Whether a CSV cell's (stripped) text means a missing value."""
        return self.missing is not None and cell in self.missing

    # -- what the source is ----------------------------------------------------------------
    def _kind(self) -> str:
        if self.source.startswith("river:"):
            return "river"
        if self.source in BUNDLED:
            return "bundled"
        if self.format is not None:
            return self.format
        if self.source == "-":
            return "csv"
        suffix = Path(self.source).suffix.lower()
        if suffix == ".csv":
            return "csv"
        if suffix in (".jsonl", ".json", ".ndjson"):
            return "jsonl"
        raise ValueError(f"cannot tell the format of {self.source!r} from its suffix; "
                         f"give --format {'|'.join(FORMATS)}")

    def _river(self):
        from river import datasets
        from river.datasets import base

        name = self.source[len("river:"):]
        module, _, cls_name = name.rpartition(".")
        where = {"": datasets, "synth": datasets.synth}.get(module)
        cls = getattr(where, cls_name, None) if where is not None else None
        if not (inspect.isclass(cls) and issubclass(cls, base.Dataset)):
            raise ValueError(f"unknown river dataset {name!r}: give a class of river.datasets "
                             "(e.g. Phishing, Bananas) or river.datasets.synth (e.g. "
                             "synth.Agrawal, synth.SEA)")
        if issubclass(cls, base.RemoteDataset):
            raise ValueError(f"river dataset {name!r} needs a download; use one bundled with "
                             "river (e.g. Phishing, Bananas) or a generator (synth.*)")
        takes_seed = "seed" in inspect.signature(cls).parameters
        if self.seed is not None and not takes_seed:
            raise ValueError(f"river dataset {name!r} takes no seed")
        return cls(seed=self.seed) if self.seed is not None else cls()

    @property
    def effective_limit(self) -> int | None:
        """``limit``, or :data:`DEFAULT_GENERATOR_LIMIT` for an endless generator."""
        if self.limit is None and self._dataset is not None and self._dataset.n_samples is None:
            return DEFAULT_GENERATOR_LIMIT
        return self.limit

    @property
    def total(self) -> int | None:
        """How many records to expect (for a progress bar), or None when unknown."""
        n = None
        if self._dataset is not None:
            n = self._dataset.n_samples
        limit = self.effective_limit
        return limit if n is None else (n if limit is None else min(n, limit))

    # -- reading ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict | BadRow]:
        limit = self.effective_limit
        if limit == 0:
            return
        n = 0
        for item in self._items():
            yield item
            if not isinstance(item, BadRow):
                n += 1
                if n == limit:
                    return

    def _items(self) -> Iterator[dict | BadRow]:
        if self.kind == "river":
            return self._pairs(self._dataset)
        if self.kind == "bundled":
            return self._arrays()
        if self.source == "-":
            return self._text(self.stdin if self.stdin is not None else sys.stdin)
        return self._file()

    def _file(self) -> Iterator[dict | BadRow]:
        with open(self.source, newline="", encoding="utf-8") as f:
            yield from self._text(f)

    def _text(self, f: TextIO) -> Iterator[dict | BadRow]:
        lines = _without_bom(f)
        return self._csv(lines) if self.kind == "csv" else self._jsonl(lines)

    def _csv(self, f: Iterable[str]) -> Iterator[dict | BadRow]:
        lines = iter(f)
        first = next(lines, None)
        if first is None:
            return
        delimiter = self.delimiter or _delimiter(first)
        number = _decimal_comma if delimiter == ";" else _number
        rows = csv.reader(itertools.chain([first], lines), delimiter=delimiter)
        header = [h.strip() for h in next(rows)]
        label = self.label if self.label is not None else ("label" if "label" in header else None)
        id_ = self.id if self.id is not None else ("id" if "id" in header else None)
        for name, flag in ((label, "--label"), (id_, "--id")):
            if name is not None and name not in header:
                raise ValueError(f"{flag} column {name!r} is not in the header {header}")
        index = {h: i for i, h in enumerate(header)}
        columns = self.features
        if columns is not None:
            missing = [c for c in columns if c not in index]
            if missing:
                raise ValueError(f"--features columns {missing} are not in the header {header}")
        missing = [c for c in self.categorical if c not in index]
        if missing:
            raise ValueError(f"--categorical columns {missing} are not in the header {header}")
        self._not_categorical(label, id_)
        numbered = ((rows.line_num, row) for row in rows if row)  # blank lines skipped
        if columns is None:
            ahead = list(itertools.islice(numbered, SNIFF_ROWS))
            columns = _numeric_columns([{h: number(v) for h, v in zip(header, row)
                                         if not self._is_missing(v.strip())}
                                        for _, row in ahead if len(row) == len(header)],
                                       exclude=(label, id_, *self.categorical),
                                       present_only=True)
            if ahead and not columns and not self.categorical:
                raise ValueError(
                    f"no column of the header {header} is a number in most of the first "
                    f"{len(ahead)} rows (read with the delimiter {delimiter!r}); name the "
                    "feature columns with --features, or the delimiter with --delimiter")
            numbered = itertools.chain(ahead, numbered)
        self.columns = list(columns)
        self.left_out = [h for h in header if h not in columns and h not in (label, id_)
                         and h not in self.categorical]

        def cell(c: str) -> str | None:  # a categorical column's text; None: missing
            text = row[index[c]].strip()
            return None if not text or self._is_missing(text) else text
        for row_no, (line, row) in enumerate(numbered):
            if len(row) != len(header):
                yield BadRow(line, f"expected {len(header)} columns, got {len(row)}")
                continue
            record = {"id": self.first_id + row_no}
            if id_ is not None:
                value = row[index[id_]].strip()
                if not value:
                    yield BadRow(line, f"missing id in column {id_!r}")
                    continue
                record["id"] = _scalar(value)
            features, bad = [], None
            for c in columns:
                x = number(row[index[c]])
                if x is None and not self._is_missing(row[index[c]].strip()):
                    bad = f"feature {c!r} is not a finite number: {row[index[c]]!r:.40}"
                    break
                features.append(x)
            if bad:
                yield BadRow(line, bad)
                continue
            if self.categorical:
                features.extend(self._one_hot(cell))
            record["features"] = features
            if label is not None:
                value = row[index[label]].strip()
                if not value:
                    yield BadRow(line, f"missing label in column {label!r}")
                    continue
                record["label"] = _scalar(value, number)
            yield record

    def _jsonl(self, f: TextIO) -> Iterator[dict | BadRow]:
        parsed = (self._parse(line, text) for line, text in enumerate(f, start=1)
                  if text.strip())  # blank lines skipped
        ahead = list(itertools.islice(parsed, SNIFF_ROWS))
        objects = [obj for _, obj in ahead if isinstance(obj, dict)]
        label = self.label
        if label is None:
            label = "label" if any("label" in obj for obj in objects) else None
        id_ = self.id if self.id is not None else (
            "id" if any("id" in obj for obj in objects) else None)
        self._not_categorical(label, id_)
        columns = self.features
        if columns is None:
            if 2 * sum(isinstance(obj.get("features"), list) for obj in objects) > len(objects):
                columns = VECTOR  # the job's own records: {"features": [...], "label": ...}
            else:
                missing = self.missing is not None  # then a null abstains
                columns = _numeric_columns([{k: _feature(v) for k, v in obj.items()
                                             if not (missing and v is None)}
                                            for obj in objects],
                                           exclude=(label, id_, *self.categorical),
                                           present_only=missing)
            if objects and not columns and not self.categorical:
                raise ValueError(
                    f"no key is a number in most of the first {len(objects)} objects, and "
                    "they hold no \"features\" array; name the feature keys with --features")
        if columns is not VECTOR:
            self.columns = list(columns)
            keys = dict.fromkeys(k for obj in objects for k in obj)
            self.left_out = [k for k in keys if k not in columns and k not in (label, id_)
                             and k not in self.categorical]
        for row_no, (line, obj) in enumerate(itertools.chain(ahead, parsed)):
            yield obj if isinstance(obj, BadRow) else self._object(line, row_no, obj, label,
                                                                  columns, id_)

    @staticmethod
    def _parse(line: int, text: str) -> tuple[int, dict | BadRow]:
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return line, BadRow(line, f"invalid JSON: {exc}")
        if not isinstance(obj, dict):
            return line, BadRow(line, f"expected a JSON object, got {type(obj).__name__}")
        return line, obj

    def _object(self, line: int, row_no: int, obj: dict, label: str | None,
                columns: Sequence[str], id_: str | None) -> dict | BadRow:
        record = {"id": self.first_id + row_no}
        if id_ is not None:
            if obj.get(id_) is None:
                return BadRow(line, f"missing id {id_!r}")
            record["id"] = obj[id_]
        features = []
        if columns is VECTOR:
            given = obj.get("features")
            if not isinstance(given, list):
                return BadRow(line, f"\"features\" is not an array: {given!r:.40}")
            for i, v in enumerate(given):
                x = _feature(v)
                if x is None and not (v is None and self.missing is not None):
                    return BadRow(line, f"feature {i} is not a finite number: {v!r:.40}")
                features.append(x)
            columns = ()
        for c in columns:
            if c not in obj and self.missing is None:
                return BadRow(line, f"missing feature {c!r}")
            x = _feature(obj.get(c))
            if x is None and not (obj.get(c) is None and self.missing is not None):
                return BadRow(line, f"feature {c!r} is not a finite number: {obj[c]!r:.40}")
            features.append(x)
        if self.categorical:
            try:
                features.extend(self._one_hot(obj.get))
            except TypeError as exc:
                return BadRow(line, str(exc))
        record["features"] = features
        if label is not None:
            if obj.get(label) is None:
                return BadRow(line, f"missing label {label!r}")
            record["label"] = obj[label]
        return record

    def _pairs(self, pairs: Iterable[tuple[dict, Any]]) -> Iterator[dict | BadRow]:
        columns = self.features
        for n, (x, y) in enumerate(pairs, start=1):
            if columns is None:
                columns = [k for k, v in x.items()
                           if _feature(v) is not None and k not in self.categorical]
            features, bad = [], None
            for c in columns:
                v = _feature(x.get(c))
                if v is None and not (x.get(c) is None and self.missing is not None):
                    bad = f"feature {c!r} is not a finite number: {x.get(c)!r:.40}"
                    break
                features.append(v)
            if not bad and self.categorical:
                try:
                    features.extend(self._one_hot(x.get))
                except TypeError as exc:
                    bad = str(exc)
            if bad:
                yield BadRow(n, bad)
                continue
            record = {"id": self.first_id + n - 1, "features": features}
            if y is not None:
                record["label"] = y.item() if hasattr(y, "item") else y
            yield record

    def _arrays(self) -> Iterator[dict]:
        import numpy as np

        if self.source == "shuttle":
            from learning.datasets import shuttle

            X, y = shuttle()
        elif self.source.endswith("-drift"):
            from learning.datasets import drift

            X, y = drift(self.source[:-len("-drift")], n=self.limit or DRIFT_RECORDS,
                         seed=42 if self.seed is None else self.seed)
        else:
            from sklearn.datasets import load_digits

            d = load_digits()
            X, y = d.data, d.target
        for i, (x, label) in enumerate(zip(np.asarray(X, dtype=float).tolist(),
                                           np.asarray(y).tolist())):
            yield {"id": self.first_id + i, "features": x, "label": label}


@dataclass
class StreamSummary:
    """What :func:`write_stream` did (records, not messages)."""

    source: str
    training: int = 0
    forecasting: int = 0
    skipped: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"dataset": self.source, "training": self.training,
                "forecasting": self.forecasting, "skipped": self.skipped,
                "seconds": round(self.seconds, 3)}


def write_stream(reader: Iterable[dict | BadRow], send: Callable[[str, Any], None], *,
                 forecast_every: int = 0, records_per_message: int = 1,
                 rate: float | None = None, progress: bool = False, total: int | None = None,
                 errors: TextIO | None = None, source: str = "") -> StreamSummary:
    """Send ``reader``'s records: every ``forecast_every``-th record (the N-th, 2N-th, …
    record written) to ``"forecasting"`` without its label, the others to ``"training"``.

    Parameters
    ----------
    send : callable
        ``send(topic, value)`` with ``topic`` ``"training"`` or ``"forecasting"`` and
        ``value`` one record, or a list of ``records_per_message`` records (the last
        message of a topic may hold fewer).
    forecast_every : int
        0: every record goes to training.
    records_per_message : int
        Records per message (>= 1); more than 1 sends JSON arrays.
    rate : float or None
        Records per second (a live replay); None: as fast as possible.
    progress : bool
        A tqdm bar on stderr, of ``total`` records when known.
    errors : text stream or None
        Where bad rows are reported, ``line N: reason`` (default stderr).

    Raises
    ------
    ValueError
        ``forecast_every < 0``, ``records_per_message < 1`` or ``rate <= 0``.
    """
    if forecast_every < 0:
        raise ValueError(f"forecast_every must be >= 0, got {forecast_every}")
    if records_per_message < 1:
        raise ValueError(f"records_per_message must be >= 1, got {records_per_message}")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be > 0 records/s, got {rate}")
    from tqdm import tqdm

    errors = errors if errors is not None else sys.stderr
    summary = StreamSummary(source)
    pending: dict[str, list] = {"training": [], "forecasting": []}

    def put(topic: str, record: dict) -> None:
        if records_per_message == 1:
            send(topic, record)
            return
        pending[topic].append(record)
        if len(pending[topic]) == records_per_message:
            send(topic, pending[topic])
            pending[topic] = []

    start = time.monotonic()
    bar = tqdm(total=total, unit="rec", disable=not progress, file=sys.stderr)
    try:
        n = 0
        for item in reader:
            if isinstance(item, BadRow):
                summary.skipped += 1
                print(item, file=errors)
                continue
            n += 1
            if rate is not None:
                delay = start + (n - 1) / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if forecast_every and n % forecast_every == 0:
                item = {k: v for k, v in item.items() if k != "label"}
                put("forecasting", item)
                summary.forecasting += 1
            else:
                put("training", item)
                summary.training += 1
            bar.update(1)
        for topic, batch in pending.items():
            if batch:
                send(topic, batch)
    finally:
        bar.close()
    summary.seconds = time.monotonic() - start
    return summary
