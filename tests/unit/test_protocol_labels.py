"""Label rules, selector strings and Gazette selector matching."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_gazette.errors import LabelError, SelectorError
from pyspark_gazette.protocol import label_set, pb
from pyspark_gazette.protocol.labels import (
    format_selector,
    matches,
    parse_selector,
    validate_label,
    validate_label_set,
    validate_selector,
    validate_spec_labels,
)


def L(name: str, value: str = "", prefix: bool = False) -> pb.Label:
    return pb.Label(name=name, value=value, prefix=prefix)


def sel(include=(), exclude=()) -> pb.LabelSelector:
    return pb.LabelSelector(include=pb.LabelSet(labels=list(include)), exclude=pb.LabelSet(labels=list(exclude)))


# --------------------------------------------------------------------------------------------
# validate_label / validate_label_set


@pytest.mark.parametrize("name", ["ab", "a" * 64, "app.gazette.dev/tag", "x-_+/.9"])
def test_valid_names(name):
    validate_label(name, "")


@pytest.mark.parametrize("name", ["a", "a" * 65, "", "a b", "a=b", "a%b", "ä" + "b", "a:b"])
def test_invalid_names(name):
    with pytest.raises(LabelError, match="label name"):
        validate_label(name, "v")


@pytest.mark.parametrize("value", ["", "x", "a=b%20", "v" * 1024, "-_+/.=%"])
def test_valid_values(value):
    validate_label("name", value)


@pytest.mark.parametrize("value", ["v" * 1025, "a b", "a,b", "(x)", "a!b", "é"])
def test_invalid_values_name_the_label(value):
    with pytest.raises(LabelError, match="'lbl'"):
        validate_label("lbl", value)


def test_prefix_only_when_allowed():
    with pytest.raises(LabelError, match="prefix"):
        validate_label("name", "a/", prefix=True)
    validate_label("name", "a/", prefix=True, allow_prefix=True)
    ls = pb.LabelSet(labels=[L("name", "a/", True)])
    with pytest.raises(LabelError, match="prefix"):
        validate_label_set(ls)
    validate_label_set(ls, allow_prefix=True)


def test_label_set_order_and_uniqueness():
    validate_label_set(label_set({"aa": ["x", "y"], "bb": ""}))
    with pytest.raises(LabelError, match="sorted"):
        validate_label_set(pb.LabelSet(labels=[L("bb", "x"), L("aa", "x")]))
    with pytest.raises(LabelError, match="sorted"):
        validate_label_set(pb.LabelSet(labels=[L("aa", "y"), L("aa", "x")]))
    with pytest.raises(LabelError, match="unique"):
        validate_label_set(pb.LabelSet(labels=[L("aa", "x"), L("aa", "x")]))
    with pytest.raises(LabelError, match="empty and a non-empty"):
        validate_label_set(pb.LabelSet(labels=[L("aa", ""), L("aa", "x")]))
    with pytest.raises(LabelError, match="'b'"):
        validate_label_set(pb.LabelSet(labels=[L("aa", "x"), L("b", "x")]))


# --------------------------------------------------------------------------------------------
# validate_spec_labels


def test_spec_labels_ok():
    validate_spec_labels(
        label_set(
            {
                "content-type": "application/x-ndjson",
                "app.gazette.dev/message-type": "Ride",
                "app.gazette.dev/message-subtype": "v2",
                "app.gazette.dev/tag": ["a", "b"],
                "app.gazette.dev/region": "eu",
            }
        )
    )
    validate_spec_labels(pb.LabelSet())


@pytest.mark.parametrize("meta", ["name", "prefix"])
def test_spec_labels_reject_meta_labels(meta):
    with pytest.raises(LabelError, match=meta):
        validate_spec_labels(label_set({meta: "a/"}))


@pytest.mark.parametrize(
    "name",
    [
        "app.gazette.dev/managed-by",
        "app.gazette.dev/instance",
        "app.gazette.dev/region",
        "content-type",
    ],
)
def test_spec_labels_single_value(name):
    with pytest.raises(LabelError, match="only one value"):
        validate_spec_labels(label_set({name: ["text/csv", "text/plain"]}))


@pytest.mark.parametrize("ct", ["application/x-ndjson", "text/csv", "text", "application/vnd.foo+json"])
def test_content_type_mime_ok(ct):
    validate_spec_labels(label_set({"content-type": ct}))


@pytest.mark.parametrize("ct", ["", "text/", "/csv", "a/b/c", "a=b"])
def test_content_type_mime_bad(ct):
    with pytest.raises(LabelError, match="MIME"):
        validate_spec_labels(label_set({"content-type": ct}))


def test_message_type_dependencies():
    with pytest.raises(LabelError, match="requires label 'content-type'"):
        validate_spec_labels(label_set({"app.gazette.dev/message-type": "T"}))
    with pytest.raises(LabelError, match="requires label 'app.gazette.dev/message-type'"):
        validate_spec_labels(label_set({"content-type": "text/csv", "app.gazette.dev/message-subtype": "S"}))


# --------------------------------------------------------------------------------------------
# parse_selector / format_selector


@pytest.mark.parametrize(
    "text, include, exclude",
    [
        ("", [], []),
        ("aa=bb", [L("aa", "bb")], []),
        (" aa == bb ", [L("aa", "bb")], []),
        ("aa!=bb", [], [L("aa", "bb")]),
        ("aa in (x, y)", [L("aa", "x"), L("aa", "y")], []),
        ("aa notin (y,x)", [], [L("aa", "x"), L("aa", "y")]),
        ("aa not in (x)", [], [L("aa", "x")]),
        ("aa", [L("aa")], []),
        ("!aa", [], [L("aa")]),
        ("! aa , bb", [L("bb")], [L("aa")]),
        ("name:prefix=foo/", [L("name", "foo/", True)], []),
        ("cc:prefix in (a/, b/)", [L("cc", "a/", True), L("cc", "b/", True)], []),
        ("!cc:prefix", [], [L("cc", "", True)]),
        ("prefix=a/b/", [L("prefix", "a/b/")], []),
        ("zz=1,aa=2,", [L("aa", "2"), L("zz", "1")], []),
        ("aa=b=c%", [L("aa", "b=c%")], []),
        (
            "topic in (topic/one, topic/two), prefix=my/journal/",
            [L("prefix", "my/journal/"), L("topic", "topic/one"), L("topic", "topic/two")],
            [],
        ),
    ],
)
def test_parse_selector(text, include, exclude):
    got = parse_selector(text)
    assert got == sel(include, exclude)
    assert parse_selector(format_selector(got)) == got


def test_format_selector_canonical():
    s = parse_selector("dd in (x,y), !cc, bb!=z, aa, ee notin (p,q), name:prefix=a/")
    assert format_selector(s) == "aa,dd in (x,y),name:prefix=a/,bb!=z,!cc,ee notin (p,q)"
    # An include value starting with '=' is kept unambiguous.
    s = sel([L("aa", "=x")])
    assert format_selector(s) == "aa in (=x)"
    assert parse_selector(format_selector(s)) == s


@pytest.mark.parametrize(
    "text, where",
    [
        ("aa=", "position 3"),
        (",aa", "position 0"),
        ("aa bb", "'aa bb'"),
        ("aa in (x", "position 8"),
        ("aa in ()", "label value"),
        ("aa:pre=1", "position 2"),
        ("aa=b c", "position 5"),
        ("aa=x,aa", "empty and a non-empty"),
        ("aa=x,aa=x", "unique"),
        ("x=1", "label name 'x'"),
        ("prefix=a", "must end in '/'"),
        ("aa=(x)", "label value"),
    ],
)
def test_parse_selector_errors(text, where):
    with pytest.raises(SelectorError, match=r"(?s).*" + where.replace("(", r"\(").replace(")", r"\)")):
        parse_selector(text)


def test_parse_selector_type():
    with pytest.raises(SelectorError):
        parse_selector(None)  # type: ignore[arg-type]


_names = st.text(alphabet="abcXYZ019-_+/.", min_size=2, max_size=8)
_values = st.text(alphabet="abcXYZ019-_+/.=%", min_size=1, max_size=8)


@st.composite
def selectors(draw):
    def side():
        labels = {}
        for name in draw(st.lists(_names, max_size=4, unique=True)):
            prefix = draw(st.booleans())
            if draw(st.booleans()):
                labels[(name, "")] = prefix
            else:
                for v in draw(st.lists(_values, min_size=1, max_size=3, unique=True)):
                    labels[(name, v)] = prefix
        return [L(n, v, p) for (n, v), p in sorted(labels.items())]

    s = sel(side(), side())
    # The 'prefix' meta-label must end in '/'; keep the generator simple and avoid it.
    if any(label.name == "prefix" for label in [*s.include.labels, *s.exclude.labels]):
        return sel()
    return s


@settings(max_examples=300, deadline=None)
@given(selectors())
def test_format_parse_round_trip(s):
    validate_selector(s)
    text = format_selector(s)
    assert parse_selector(text) == s
    assert format_selector(parse_selector(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab=!,() :inotprefx/.%\t", max_size=30) | st.text(max_size=30))
def test_random_strings_parse_or_raise_selector_error(text):
    try:
        s = parse_selector(text)
    except SelectorError:
        return
    assert parse_selector(format_selector(s)) == s


# --------------------------------------------------------------------------------------------
# matches


LABELS = label_set({"topic": ["one", "two"], "region": "eu", "content-type": "application/x-ndjson"})


@pytest.mark.parametrize(
    "text, expect",
    [
        ("", True),
        ("topic=one", True),
        ("topic=three", False),
        ("topic in (three, two)", True),
        ("topic", True),
        ("missing", False),
        ("!missing", True),
        ("!topic", False),
        ("topic!=three", True),
        ("topic!=one", False),
        ("topic notin (x, y)", True),
        ("topic notin (x, two)", False),
        ("topic=one, region=eu", True),
        ("topic=one, region=us", False),
        ("region:prefix=e", True),
        ("region:prefix=u", False),
        ("region:prefix!=e", False),
        ("content-type:prefix=application/", True),
        ("topic=one, !region", False),
    ],
)
def test_matches_labels(text, expect):
    assert matches(parse_selector(text), LABELS) is expect


@pytest.mark.parametrize(
    "text, expect",
    [
        ("name=examples/rides/part-000", True),
        ("name=examples/rides/part-001", False),
        ("name in (x/y, examples/rides/part-000)", True),
        ("name:prefix=examples/", True),
        ("name:prefix=other/", False),
        ("prefix=examples/", True),
        ("prefix=examples/rides/", True),
        ("prefix=examples/ri/", False),
        ("prefix=other/", False),
        ("prefix!=examples/", False),
        ("name!=examples/rides/part-000", False),
        ("name!=other", True),
        ("prefix=examples/, topic=one", True),
        ("prefix=examples/, topic=three", False),
        ("name", True),
    ],
)
def test_matches_meta_labels(text, expect):
    assert matches(parse_selector(text), LABELS, journal_name="examples/rides/part-000") is expect


def test_meta_labels_without_journal_name_are_plain_labels():
    assert not matches(parse_selector("name=aa"), LABELS)
    assert matches(parse_selector("name=aa"), label_set({"name": "aa"}))


def test_prefix_meta_label_is_an_or_with_name():
    # Both rewrite to the 'name' label: any one of its values matches.
    s = parse_selector("name=a/b, prefix=x/")
    assert matches(s, pb.LabelSet(), journal_name="a/b")
    assert matches(s, pb.LabelSet(), journal_name="x/y")
    assert not matches(s, pb.LabelSet(), journal_name="z/y")


def test_empty_set_and_exists():
    assert matches(sel(), pb.LabelSet())
    assert not matches(parse_selector("aa"), pb.LabelSet())
    assert matches(parse_selector("!aa"), pb.LabelSet())
