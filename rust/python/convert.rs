//! Python values <-> core types. Rows cross as dicts (see `python/memini/_core.pyi`).

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

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

/// A memory -> row dict.
pub fn row<'py>(py: Python<'py>, m: Memory) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", m.id)?;
    d.set_item("namespace", m.namespace)?;
    d.set_item("content", m.content)?;
    d.set_item("tier", m.tier.as_str())?;
    d.set_item("level", m.level.map(Level::as_str))?;
    d.set_item("summary", m.summary)?;
    d.set_item("metadata", m.metadata)?;
    d.set_item("tags", m.tags)?;
    d.set_item("importance", m.importance)?;
    d.set_item("created_at", m.created_at)?;
    d.set_item("updated_at", m.updated_at)?;
    d.set_item("last_accessed_at", m.last_accessed_at)?;
    d.set_item("access_count", m.access_count)?;
    d.set_item("expires_at", m.expires_at)?;
    d.set_item("superseded_by", m.superseded_by)?;
    d.set_item("valid_from", m.valid_from)?;
    d.set_item("valid_to", m.valid_to)?;
    d.set_item("confidence", m.confidence)?;
    d.set_item("linked_memory_ids", m.linked_memory_ids)?;
    d.set_item("fingerprint", m.fingerprint)?;
    Ok(d)
}

/// Memories -> list of row dicts.
pub fn rows<'py>(py: Python<'py>, ms: Vec<Memory>) -> PyResult<Bound<'py, PyList>> {
    let items = ms
        .into_iter()
        .map(|m| row(py, m))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// Hits -> list of (row dict, score).
pub fn hits<'py>(py: Python<'py>, hs: Vec<Scored>) -> PyResult<Bound<'py, PyList>> {
    let items = hs
        .into_iter()
        .map(|h| Ok((row(py, h.memory)?, h.score)))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// A vector -> 1-D float32 array.
pub fn array<'py>(py: Python<'py>, v: Vec<f32>) -> Bound<'py, PyArray1<f32>> {
    PyArray1::from_vec(py, v)
}
