//! Python values <-> core types. Rows to write cross as dicts (see `python/memini/_core.pyi`);
//! rows read come back as `memini.Memory` / `memini.Scored` objects, built here.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDateTime, PyDict, PyList, PyString, PyTzInfo};

use super::errors::to_py;
use crate::engine::{Fusion, Recalled};
use crate::error::Error;
use crate::types::{
    FilterSpec, Level, Memory, MemoryPatch, Micros, NewMemory, Scored, SortKey, Tier, Unstamped,
};

fn invalid(py: Python<'_>, msg: String) -> PyErr {
    to_py(py, Error::invalid(msg))
}

/// A dict key, made once per process (`intern!`): a lookup with a `&str` key builds and
/// hashes a new string each time (21 per row written, 15 per filter).
macro_rules! key {
    ($d:expr, $name:expr) => {
        intern!($d.py(), $name)
    };
}

/// Extracts `key` from a row dict, naming the field when its type is wrong.
fn field<'py, T: FromPyObjectOwned<'py>>(
    d: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
) -> PyResult<Option<T>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v.extract::<T>().map(Some).map_err(|e| {
            let e: PyErr = e.into();
            invalid(d.py(), format!("field {:?}: {e}", key.to_string()))
        }),
    }
}

fn req<'py, T: FromPyObjectOwned<'py>>(
    d: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
) -> PyResult<T> {
    field(d, key)?
        .ok_or_else(|| invalid(d.py(), format!("field {:?} is required", key.to_string())))
}

/// Recall's fusion rule from its name and parameter (`"convex"` alpha, `"rrf"` k).
pub fn fusion(py: Python<'_>, name: &str, param: f64) -> PyResult<Fusion> {
    match name {
        "convex" => Ok(Fusion::Convex { alpha: param }),
        "rrf" => Ok(Fusion::Rrf { k: param }),
        other => Err(invalid(
            py,
            format!("unknown fusion {other:?} (use \"convex\" or \"rrf\")"),
        )),
    }
}

pub fn tier(py: Python<'_>, s: &str) -> PyResult<Tier> {
    Tier::parse(s).map_err(|e| invalid(py, e.to_string()))
}

fn level(py: Python<'_>, s: Option<String>) -> PyResult<Option<Level>> {
    s.map(|s| Level::parse(&s).map_err(|e| invalid(py, e.to_string())))
        .transpose()
}

/// A 1-D float32 array (or None) -> owned vector, copied with the GIL held. Not through a
/// `PyReadonlyArray` borrow: numpy's borrow tracking costs ~4 µs of GIL-held time per call
/// (measured on one query vector), a tenth of a vector search's, and the copy is all we do.
pub fn vector(v: Option<&Bound<'_, PyArray1<f32>>>) -> PyResult<Option<Vec<f32>>> {
    v.map(|a| {
        a.to_vec()
            .map_err(|e| invalid(a.py(), format!("vector: {e}")))
    })
    .transpose()
}

fn embedding(d: &Bound<'_, PyDict>) -> PyResult<Option<Vec<f32>>> {
    match d.get_item(key!(d, "embedding"))? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => {
            let arr = v
                .cast_into::<PyArray1<f32>>()
                .map_err(|e| invalid(d.py(), format!("embedding: {e}")))?;
            vector(Some(&arr))
        }
    }
}

/// `Some(value)` when the key is present: Some(None) for an explicit None.
#[allow(
    clippy::option_option,
    reason = "Some(None) means: set the optional field to None"
)]
fn opt_field<'py, T: FromPyObjectOwned<'py>>(
    d: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
) -> PyResult<Option<Option<T>>> {
    if d.contains(key)? {
        field(d, key).map(Some)
    } else {
        Ok(None)
    }
}

fn metadata<'py>(py: Python<'py>, c: &Classes, json: String) -> PyResult<Bound<'py, PyAny>> {
    if json.is_empty() || json == "{}" {
        Ok(PyDict::new(py).into_any())
    } else {
        c.metadata.bind(py).call1((json,))
    }
}

/// A row's three timestamps are usually equal: they share one (immutable) datetime object.
#[derive(Default)]
struct Stamps<'py>(Option<(Micros, Bound<'py, PyDateTime>)>);

impl<'py> Stamps<'py> {
    fn get(&mut self, py: Python<'py>, us: Micros) -> PyResult<Bound<'py, PyDateTime>> {
        match &self.0 {
            Some((t, dt)) if *t == us => Ok(dt.clone()),
            _ => {
                let dt = datetime(py, us)?;
                self.0.get_or_insert((us, dt.clone()));
                Ok(dt)
            }
        }
    }
}

/// How each kind of `Memory` field crosses to and from Python (see `for_memory_fields`):
/// written rows arrive as dicts of plain values (`memini._convert.memory_to_row`); read rows
/// leave as `memini.Memory` objects with enum members, datetimes and metadata dicts.
macro_rules! memory_io {
    ($( $(#[$doc:meta])* $name:ident : $ty:ty, $rec:ident, $py:ident, $upd:ident; )*) => {
        /// A row dict -> a memory to write.
        pub fn new_memory(d: &Bound<'_, PyDict>) -> PyResult<NewMemory> {
            let py = d.py();
            let mut unstamped = Unstamped::default();
            let memory = Memory {
                $( $name: memory_io!(@read $py, py, d, unstamped, $name), )*
            };
            Ok(NewMemory { memory, unstamped, embedding: embedding(d)? })
        }

        /// A partial row dict -> a patch (only present keys change).
        pub fn patch(d: &Bound<'_, PyDict>) -> PyResult<MemoryPatch> {
            let py = d.py();
            Ok(MemoryPatch {
                $( $name: memory_io!(@patch $py, py, d, $name), )*
                embedding: if d.contains(key!(d, "embedding"))? {
                    Some(embedding(d)?)
                } else {
                    None
                },
            })
        }

        /// A row -> `memini.Memory` (enum members, aware UTC datetimes, parsed metadata,
        /// `embedding=None`).
        pub fn memory(py: Python<'_>, m: Memory) -> PyResult<Bound<'_, PyAny>> {
            let c = classes(py)?;
            let obj = Instance::new(py, c, &c.memory)?;
            let mut stamps = Stamps::default();
            $( memory_io!(@write $py, py, c, obj, stamps, m, $name); )*
            obj.set(intern!(py, "embedding"), py.None())?;
            Ok(obj.0)
        }
    };

    (@read text, $py:ident, $d:ident, $u:ident, $name:ident) => { req($d, key!($d, stringify!($name)))? };
    (@read digest, $py:ident, $d:ident, $u:ident, $name:ident) => {
        field($d, key!($d, stringify!($name)))?.unwrap_or_default()
    };
    (@read tier, $py:ident, $d:ident, $u:ident, $name:ident) => {
        tier($py, &req::<String>($d, key!($d, stringify!($name)))?)?
    };
    (@read level, $py:ident, $d:ident, $u:ident, $name:ident) => {
        level($py, field($d, key!($d, stringify!($name)))?)?
    };
    (@read json, $py:ident, $d:ident, $u:ident, $name:ident) => {
        field($d, key!($d, stringify!($name)))?.unwrap_or_else(|| "{}".to_owned())
    };
    (@read time, $py:ident, $d:ident, $u:ident, $name:ident) => {
        match field($d, key!($d, stringify!($name)))? {
            Some(us) => us,
            None => {
                $u.$name = true;
                0
            }
        }
    };
    (@read $kind:ident, $py:ident, $d:ident, $u:ident, $name:ident) => {
        field($d, key!($d, stringify!($name)))?.unwrap_or_default()
    };

    (@patch tier, $py:ident, $d:ident, $name:ident) => {
        field::<String>($d, key!($d, stringify!($name)))?
            .map(|s| tier($py, &s))
            .transpose()?
    };
    (@patch level, $py:ident, $d:ident, $name:ident) => {
        opt_field::<String>($d, key!($d, stringify!($name)))?
            .map(|l| level($py, l))
            .transpose()?
    };
    (@patch opt_text, $py:ident, $d:ident, $name:ident) => { opt_field($d, key!($d, stringify!($name)))? };
    (@patch opt_float, $py:ident, $d:ident, $name:ident) => { opt_field($d, key!($d, stringify!($name)))? };
    (@patch opt_time, $py:ident, $d:ident, $name:ident) => { opt_field($d, key!($d, stringify!($name)))? };
    (@patch $kind:ident, $py:ident, $d:ident, $name:ident) => { field($d, key!($d, stringify!($name)))? };

    (@write digest, $py:ident, $c:ident, $o:ident, $s:ident, $m:ident, $name:ident) => {};
    (@write tier, $py:ident, $c:ident, $o:ident, $s:ident, $m:ident, $name:ident) => {
        $o.set(intern!($py, stringify!($name)), $c.tiers[$m.$name as usize].bind($py))?
    };
    (@write level, $py:ident, $c:ident, $o:ident, $s:ident, $m:ident, $name:ident) => {
        $o.set(
            intern!($py, stringify!($name)),
            $m.$name.map(|l| $c.levels[l as usize].bind($py)),
        )?
    };
    (@write json, $py:ident, $c:ident, $o:ident, $s:ident, $m:ident, $name:ident) => {
        $o.set(intern!($py, stringify!($name)), metadata($py, $c, $m.$name)?)?
    };
    (@write time, $py:ident, $c:ident, $o:ident, $s:ident, $m:ident, $name:ident) => {
        $o.set(intern!($py, stringify!($name)), $s.get($py, $m.$name)?)?
    };
    (@write opt_time, $py:ident, $c:ident, $o:ident, $s:ident, $m:ident, $name:ident) => {
        $o.set(intern!($py, stringify!($name)), opt_datetime($py, $m.$name)?)?
    };
    (@write $kind:ident, $py:ident, $c:ident, $o:ident, $s:ident, $m:ident, $name:ident) => {
        $o.set(intern!($py, stringify!($name)), $m.$name)?
    };
}

crate::for_memory_fields!(memory_io);

/// The string enums cross as their values (`"semantic"`), parsed by the core, whose error
/// names the allowed values.
macro_rules! str_enum_from_py {
    ($($t:ty),*) => {$(
        impl<'py> FromPyObject<'_, 'py> for $t {
            type Error = PyErr;

            fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
                Self::parse(obj.cast::<PyString>()?.to_str()?).map_err(|e| to_py(obj.py(), e))
            }
        }
    )*};
}

str_enum_from_py!(Tier, Level, SortKey);

/// One key of a filter-spec dict, which must be present (None only where the type is an
/// `Option`): a spec with a key missing was not made by `memini._convert.filter_to_spec`,
/// and a default here would silently widen what the caller selects.
fn spec_key<'py, T: FromPyObjectOwned<'py>>(
    d: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
) -> PyResult<T> {
    let Some(v) = d.get_item(key)? else {
        return Err(invalid(
            d.py(),
            format!(
                "filter spec is missing the key {:?} (make the spec with \
                 memini._convert.filter_to_spec)",
                key.to_string()
            ),
        ));
    };
    v.extract::<T>().map_err(|e| {
        let e: PyErr = e.into();
        let why = e.value(d.py()).to_string();
        invalid(
            d.py(),
            format!("filter spec key {:?}: {why}", key.to_string()),
        )
    })
}

/// The error for a filter-spec dict with keys no field has (called once every field's key
/// was found in a dict with more keys than `keys`), naming them.
fn unknown_spec_keys(d: &Bound<'_, PyDict>, keys: &[&str]) -> PyErr {
    let unknown: Vec<String> = d
        .keys()
        .iter()
        .filter(|k| !matches!(k.extract::<&str>(), Ok(k) if keys.contains(&k)))
        .map(|k| k.repr().map_or_else(|_| "?".to_owned(), |r| r.to_string()))
        .collect();
    invalid(
        d.py(),
        format!(
            "filter spec has unknown key(s) {} (its keys are: {}; make the spec with \
             memini._convert.filter_to_spec)",
            unknown.join(", "),
            keys.join(", ")
        ),
    )
}

/// A filter-spec dict -> `FilterSpec`, derived from `for_filter_fields!`: the dict has
/// exactly the fields' keys; a missing or unknown one is refused, naming it.
macro_rules! filter_io {
    ($( $(#[$doc:meta])* $name:ident : $ty:ty; )*) => {
        /// A filter-spec dict -> `FilterSpec`.
        pub fn filter(d: &Bound<'_, PyDict>) -> PyResult<FilterSpec> {
            const KEYS: &[&str] = &[$( stringify!($name) ),*];
            let spec = FilterSpec {
                $( $name: spec_key(d, key!(d, stringify!($name)))?, )*
            };
            if d.len() == KEYS.len() {
                Ok(spec)
            } else {
                Err(unknown_spec_keys(d, KEYS))
            }
        }
    };
}

crate::for_filter_fields!(filter_io);

/// The Python objects results are made of, looked up once per process.
struct Classes {
    /// `object.__new__`: makes a dataclass instance without running `__init__`.
    new: Py<PyAny>,
    /// `object.__setattr__`: sets a field of an instance with `__slots__`.
    setattr: Py<PyAny>,
    memory: Py<PyAny>,
    scored: Py<PyAny>,
    recalled: Py<PyAny>,
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
            setattr: py
                .import("builtins")?
                .getattr("object")?
                .getattr("__setattr__")?
                .unbind(),
            memory: types.getattr("Memory")?.unbind(),
            scored: types.getattr("Scored")?.unbind(),
            recalled: types.getattr("Recalled")?.unbind(),
            tiers: members("Tier", &tiers)?,
            levels: members("Level", &levels)?,
            metadata: py
                .import("memini._convert")?
                .getattr("json_to_metadata")?
                .unbind(),
        })
    })
}

/// A new instance of a dataclass, made without running `__init__`, for the caller to set every
/// field (exactly what `__init__` does, minus argument parsing). Fields go straight into the
/// instance `__dict__`, or through `object.__setattr__` for a class with `__slots__` (which
/// also passes a frozen dataclass's guard).
struct Instance<'py>(Bound<'py, PyAny>, Option<Bound<'py, PyDict>>);

impl<'py> Instance<'py> {
    fn new(py: Python<'py>, c: &Classes, cls: &Py<PyAny>) -> PyResult<Self> {
        let obj = c.new.bind(py).call1((cls.bind(py),))?;
        let fields = match obj.getattr(intern!(py, "__dict__")) {
            Ok(d) => Some(d.cast_into::<PyDict>()?),
            Err(_) => None,
        };
        Ok(Self(obj, fields))
    }

    fn set(&self, name: &Bound<'py, PyString>, value: impl IntoPyObject<'py>) -> PyResult<()> {
        match &self.1 {
            Some(d) => d.set_item(name, value),
            None => {
                let py = self.0.py();
                let setattr = classes(py)?.setattr.bind(py);
                setattr.call1((&self.0, name, value)).map(|_| ())
            }
        }
    }
}

/// Microseconds since the epoch -> an aware UTC `datetime`, exactly (`crate::types::civil`).
fn datetime(py: Python<'_>, us: Micros) -> PyResult<Bound<'_, PyDateTime>> {
    let Some(c) = crate::types::civil(us) else {
        return Err(to_py(
            py,
            Error::Corruption(format!(
                "stored timestamp {us} µs is outside the datetime range"
            )),
        ));
    };
    PyDateTime::new(
        py,
        c.year,
        c.month,
        c.day,
        c.hour,
        c.minute,
        c.second,
        c.micro,
        Some(&PyTzInfo::utc(py)?.to_owned()),
    )
}

fn opt_datetime(py: Python<'_>, us: Option<Micros>) -> PyResult<Option<Bound<'_, PyDateTime>>> {
    us.map(|us| datetime(py, us)).transpose()
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
            let obj = Instance::new(py, c, &c.scored)?;
            obj.set(intern!(py, "memory"), memory(py, h.memory)?)?;
            obj.set(intern!(py, "score"), h.score)?;
            Ok(obj.0)
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// Recall results -> list of `memini.Recalled`, best first.
pub fn recalled(py: Python<'_>, rs: Vec<Recalled>) -> PyResult<Bound<'_, PyList>> {
    let c = classes(py)?;
    let items = rs
        .into_iter()
        .map(|r| {
            let obj = Instance::new(py, c, &c.recalled)?;
            obj.set(intern!(py, "memory"), memory(py, r.memory)?)?;
            obj.set(intern!(py, "score"), r.score)?;
            obj.set(intern!(py, "vector_score"), r.vector_score)?;
            obj.set(intern!(py, "keyword_score"), r.keyword_score)?;
            obj.set(intern!(py, "via"), r.via)?;
            Ok(obj.0)
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// A vector -> 1-D float32 array.
pub fn array<'py>(py: Python<'py>, v: Vec<f32>) -> Bound<'py, PyArray1<f32>> {
    PyArray1::from_vec(py, v)
}
