//! Python values <-> core types. Rows to write cross as dicts (see `python/memini/_core.pyi`);
//! rows read come back as `memini.Memory` / `memini.Scored` objects, built here.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDateTime, PyDict, PyList, PyTzInfo};

use super::errors::raise;
use crate::types::{
    FilterSpec, Level, Memory, MemoryPatch, Micros, NewMemory, Scored, SortKey, Tier,
};

fn invalid(py: Python<'_>, msg: String) -> PyErr {
    raise(py, "InvalidArgumentError", msg)
}

/// Extracts `key` from a row dict, naming the field when its type is wrong.
fn field<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<T>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v.extract::<T>().map(Some).map_err(|e| {
            let e: PyErr = e.into();
            invalid(d.py(), format!("field {key:?}: {e}"))
        }),
    }
}

fn req<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    field(d, key)?.ok_or_else(|| invalid(d.py(), format!("field {key:?} is required")))
}

pub fn tier(py: Python<'_>, s: &str) -> PyResult<Tier> {
    Tier::parse(s).map_err(|e| invalid(py, e.to_string()))
}

fn level(py: Python<'_>, s: Option<String>) -> PyResult<Option<Level>> {
    s.map(|s| Level::parse(&s).map_err(|e| invalid(py, e.to_string())))
        .transpose()
}

/// A 1-D float32 array (or None) -> owned vector.
pub fn vector(v: Option<PyReadonlyArray1<'_, f32>>) -> Option<Vec<f32>> {
    v.map(|a| a.as_array().iter().copied().collect())
}

fn embedding(d: &Bound<'_, PyDict>) -> PyResult<Option<Vec<f32>>> {
    match d.get_item("embedding")? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => {
            let arr = v
                .extract::<PyReadonlyArray1<'_, f32>>()
                .map_err(|e| invalid(d.py(), format!("embedding: {e}")))?;
            Ok(vector(Some(arr)))
        }
    }
}

/// A row dict -> a memory to write.
pub fn new_memory(d: &Bound<'_, PyDict>) -> PyResult<NewMemory> {
    let py = d.py();
    let created: Option<Micros> = field(d, "created_at")?;
    let updated: Option<Micros> = field(d, "updated_at")?;
    let accessed: Option<Micros> = field(d, "last_accessed_at")?;
    let memory = Memory {
        id: req(d, "id")?,
        namespace: req(d, "namespace")?,
        content: req(d, "content")?,
        tier: tier(py, &req::<String>(d, "tier")?)?,
        level: level(py, field(d, "level")?)?,
        summary: field(d, "summary")?.unwrap_or_default(),
        metadata: field(d, "metadata")?.unwrap_or_else(|| "{}".to_owned()),
        tags: field(d, "tags")?.unwrap_or_default(),
        importance: field(d, "importance")?.unwrap_or(0.0),
        created_at: created.unwrap_or(0),
        updated_at: updated.unwrap_or(0),
        last_accessed_at: accessed.unwrap_or(0),
        access_count: field(d, "access_count")?.unwrap_or(0),
        expires_at: field(d, "expires_at")?,
        superseded_by: field(d, "superseded_by")?,
        valid_from: field(d, "valid_from")?,
        valid_to: field(d, "valid_to")?,
        confidence: field(d, "confidence")?,
        linked_memory_ids: field(d, "linked_memory_ids")?.unwrap_or_default(),
        fingerprint: field(d, "fingerprint")?.unwrap_or_default(),
    };
    Ok(NewMemory {
        memory,
        has_created_at: created.is_some(),
        has_updated_at: updated.is_some(),
        has_last_accessed_at: accessed.is_some(),
        embedding: embedding(d)?,
    })
}

/// `Some(value)` when the key is present: Some(None) for an explicit None.
#[allow(
    clippy::option_option,
    reason = "Some(None) means: set the optional field to None"
)]
fn opt_field<'py, T: FromPyObjectOwned<'py>>(
    d: &Bound<'py, PyDict>,
    key: &str,
) -> PyResult<Option<Option<T>>> {
    if d.contains(key)? {
        field(d, key).map(Some)
    } else {
        Ok(None)
    }
}

/// A partial row dict -> a patch (only present keys change).
pub fn patch(d: &Bound<'_, PyDict>) -> PyResult<MemoryPatch> {
    let py = d.py();
    let content: Option<String> = field(d, "content")?;
    let fp: Option<String> = field(d, "fingerprint")?;
    Ok(MemoryPatch {
        content: content.map(|c| (c, fp.unwrap_or_default())),
        tier: field::<String>(d, "tier")?
            .map(|s| tier(py, &s))
            .transpose()?,
        level: opt_field::<String>(d, "level")?
            .map(|l| level(py, l))
            .transpose()?,
        summary: field(d, "summary")?,
        metadata: field(d, "metadata")?,
        tags: field(d, "tags")?,
        importance: field(d, "importance")?,
        updated_at: field(d, "updated_at")?,
        last_accessed_at: field(d, "last_accessed_at")?,
        access_count: field(d, "access_count")?,
        expires_at: opt_field(d, "expires_at")?,
        superseded_by: opt_field(d, "superseded_by")?,
        valid_from: opt_field(d, "valid_from")?,
        valid_to: opt_field(d, "valid_to")?,
        confidence: opt_field(d, "confidence")?,
        linked_memory_ids: field(d, "linked_memory_ids")?,
        embedding: if d.contains("embedding")? {
            Some(embedding(d)?)
        } else {
            None
        },
    })
}

/// A filter-spec dict -> `FilterSpec`.
pub fn filter(d: &Bound<'_, PyDict>) -> PyResult<FilterSpec> {
    let py = d.py();
    let tiers: Vec<String> = field(d, "tiers")?.unwrap_or_default();
    let levels: Vec<Option<String>> = field(d, "levels")?.unwrap_or_default();
    let sort_key: Option<String> = field(d, "sort_key")?;
    Ok(FilterSpec {
        tiers: tiers.iter().map(|t| tier(py, t)).collect::<PyResult<_>>()?,
        levels: levels
            .into_iter()
            .map(|l| level(py, l))
            .collect::<PyResult<_>>()?,
        tags: field(d, "tags")?.unwrap_or_default(),
        metadata: field(d, "metadata")?.unwrap_or_default(),
        exclude_metadata: field(d, "exclude_metadata")?.unwrap_or_default(),
        exclude_ids: field(d, "exclude_ids")?.unwrap_or_default(),
        include_expired: field(d, "include_expired")?.unwrap_or(false),
        include_superseded: field(d, "include_superseded")?.unwrap_or(false),
        now: req(d, "now")?,
        as_of: field(d, "as_of")?,
        memory_types: field(d, "memory_types")?.unwrap_or_default(),
        created_after: field(d, "created_after")?,
        accessed_after: field(d, "accessed_after")?,
        sort_key: sort_key
            .map(|s| SortKey::parse(&s).map_err(|e| invalid(py, e.to_string())))
            .transpose()?,
        sort_asc: field(d, "sort_asc")?.unwrap_or(false),
    })
}

/// The Python objects results are made of, looked up once per process.
struct Classes {
    /// `object.__new__`: makes a dataclass instance without running `__init__`.
    new: Py<PyAny>,
    memory: Py<PyAny>,
    scored: Py<PyAny>,
    /// `Tier` members in `Tier::ALL` order, `Level` members in `Level::ALL` order.
    tiers: Vec<Py<PyAny>>,
    levels: Vec<Py<PyAny>>,
    /// `memini._convert.json_to_metadata`: the one reader of stored metadata JSON.
    metadata: Py<PyAny>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || {
        let types = py.import("memini.types")?;
        let members = |class: &str, values: &[&str]| -> PyResult<Vec<Py<PyAny>>> {
            let cls = types.getattr(class)?;
            values
                .iter()
                .map(|v| Ok(cls.call1((*v,))?.unbind()))
                .collect()
        };
        let tiers: Vec<&str> = Tier::ALL.iter().map(|t| t.as_str()).collect();
        let levels: Vec<&str> = Level::ALL.iter().map(|l| l.as_str()).collect();
        Ok(Classes {
            new: py
                .import("builtins")?
                .getattr("object")?
                .getattr("__new__")?
                .unbind(),
            memory: types.getattr("Memory")?.unbind(),
            scored: types.getattr("Scored")?.unbind(),
            tiers: members("Tier", &tiers)?,
            levels: members("Level", &levels)?,
            metadata: py
                .import("memini._convert")?
                .getattr("json_to_metadata")?
                .unbind(),
        })
    })
}

/// A new instance of the dataclass `cls` and its empty `__dict__`, for the caller to fill
/// with every field (exactly what the dataclass `__init__` does, minus argument parsing).
fn instance<'py>(
    py: Python<'py>,
    c: &Classes,
    cls: &Py<PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
    let obj = c.new.bind(py).call1((cls.bind(py),))?;
    let fields = obj
        .getattr(intern!(py, "__dict__"))?
        .cast_into::<PyDict>()?;
    Ok((obj, fields))
}

const US_PER_DAY: Micros = 86_400_000_000;
/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z: the range of Python's datetime.
const MIN_US: Micros = -62_135_596_800_000_000;
const MAX_US: Micros = 253_402_300_799_999_999;

/// Microseconds since the epoch -> an aware UTC `datetime`, exactly (no float rounding).
fn datetime(py: Python<'_>, us: Micros) -> PyResult<Bound<'_, PyDateTime>> {
    if !(MIN_US..=MAX_US).contains(&us) {
        return Err(raise(
            py,
            "CorruptionError",
            format!("stored timestamp {us} µs is outside the datetime range"),
        ));
    }
    // civil date from days since 1970-01-01 (H. Hinnant's algorithm, proleptic Gregorian)
    let (days, rem) = (us.div_euclid(US_PER_DAY), us.rem_euclid(US_PER_DAY));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let secs = rem / 1_000_000;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "range-checked above: every component fits its type"
    )]
    PyDateTime::new(
        py,
        year as i32,
        month as u8,
        day as u8,
        (secs / 3600) as u8,
        (secs / 60 % 60) as u8,
        (secs % 60) as u8,
        (rem % 1_000_000) as u32,
        Some(&PyTzInfo::utc(py)?.to_owned()),
    )
}

fn opt_datetime(py: Python<'_>, us: Option<Micros>) -> PyResult<Option<Bound<'_, PyDateTime>>> {
    us.map(|us| datetime(py, us)).transpose()
}

/// A row -> `memini.Memory` (enum members, aware UTC datetimes, parsed metadata,
/// `embedding=None`), with the fields in the dataclass's order.
pub fn memory(py: Python<'_>, m: Memory) -> PyResult<Bound<'_, PyAny>> {
    let c = classes(py)?;
    let (obj, d) = instance(py, c, &c.memory)?;
    let metadata = if m.metadata.is_empty() || m.metadata == "{}" {
        PyDict::new(py).into_any()
    } else {
        c.metadata.bind(py).call1((m.metadata,))?
    };
    d.set_item(intern!(py, "id"), m.id)?;
    d.set_item(intern!(py, "namespace"), m.namespace)?;
    d.set_item(intern!(py, "content"), m.content)?;
    d.set_item(intern!(py, "tier"), c.tiers[m.tier as usize].bind(py))?;
    d.set_item(
        intern!(py, "level"),
        m.level.map(|l| c.levels[l as usize].bind(py)),
    )?;
    d.set_item(intern!(py, "summary"), m.summary)?;
    d.set_item(intern!(py, "metadata"), metadata)?;
    d.set_item(intern!(py, "tags"), m.tags)?;
    d.set_item(intern!(py, "importance"), m.importance)?;
    // datetimes are immutable: equal stamps (a fresh row's three) share one object
    let created = datetime(py, m.created_at)?;
    let same = |us: Micros| -> PyResult<Bound<'_, PyDateTime>> {
        if us == m.created_at {
            Ok(created.clone())
        } else {
            datetime(py, us)
        }
    };
    d.set_item(intern!(py, "created_at"), &created)?;
    d.set_item(intern!(py, "updated_at"), same(m.updated_at)?)?;
    d.set_item(intern!(py, "last_accessed_at"), same(m.last_accessed_at)?)?;
    d.set_item(intern!(py, "access_count"), m.access_count)?;
    d.set_item(intern!(py, "expires_at"), opt_datetime(py, m.expires_at)?)?;
    d.set_item(intern!(py, "superseded_by"), m.superseded_by)?;
    d.set_item(intern!(py, "valid_from"), opt_datetime(py, m.valid_from)?)?;
    d.set_item(intern!(py, "valid_to"), opt_datetime(py, m.valid_to)?)?;
    d.set_item(intern!(py, "confidence"), m.confidence)?;
    d.set_item(intern!(py, "linked_memory_ids"), m.linked_memory_ids)?;
    d.set_item(intern!(py, "embedding"), py.None())?;
    Ok(obj)
}

/// Rows -> list of `memini.Memory`.
pub fn memories(py: Python<'_>, ms: Vec<Memory>) -> PyResult<Bound<'_, PyList>> {
    let items = ms
        .into_iter()
        .map(|m| memory(py, m))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// Hits -> list of `memini.Scored`, best first.
pub fn hits(py: Python<'_>, hs: Vec<Scored>) -> PyResult<Bound<'_, PyList>> {
    let c = classes(py)?;
    let items = hs
        .into_iter()
        .map(|h| {
            let (obj, d) = instance(py, c, &c.scored)?;
            d.set_item(intern!(py, "memory"), memory(py, h.memory)?)?;
            d.set_item(intern!(py, "score"), h.score)?;
            Ok(obj)
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// A vector -> 1-D float32 array.
pub fn array<'py>(py: Python<'py>, v: Vec<f32>) -> Bound<'py, PyArray1<f32>> {
    PyArray1::from_vec(py, v)
}
