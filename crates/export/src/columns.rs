//! Columns of a table and how each is written with the `parquet` crate's
//! column writers (no Arrow needed): optional values as definition levels,
//! lists of strings as repetition levels.

use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::writer::SerializedRowGroupWriter;

/// One column's values for one row group.
pub enum Col {
    I32(Vec<i32>),
    I64(Vec<i64>),
    OptI32(Vec<Option<i32>>),
    OptI64(Vec<Option<i64>>),
    Bool(Vec<bool>),
    Str(Vec<String>),
    OptStr(Vec<Option<String>>),
    /// A list of strings per row (`LIST` of `STRING`).
    StrList(Vec<Vec<String>>),
}

impl Col {
    pub fn len(&self) -> usize {
        match self {
            Col::I32(v) => v.len(),
            Col::I64(v) => v.len(),
            Col::OptI32(v) => v.len(),
            Col::OptI64(v) => v.len(),
            Col::Bool(v) => v.len(),
            Col::Str(v) => v.len(),
            Col::OptStr(v) => v.len(),
            Col::StrList(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn levels<T: Clone>(v: &[Option<T>]) -> (Vec<T>, Vec<i16>) {
    let def = v.iter().map(|x| x.is_some() as i16).collect();
    (v.iter().flatten().cloned().collect(), def)
}

/// Write `cols` (in schema order) as one row group.
pub fn write_row_group<W: std::io::Write + Send>(
    rg: &mut SerializedRowGroupWriter<'_, W>,
    cols: &[Col],
) -> Result<(), ParquetError> {
    for col in cols {
        let Some(mut w) = rg.next_column()? else {
            return Err(ParquetError::General(
                "more columns than the schema has".into(),
            ));
        };
        match col {
            Col::I32(v) => {
                w.typed::<Int32Type>().write_batch(v, None, None)?;
            }
            Col::I64(v) => {
                w.typed::<Int64Type>().write_batch(v, None, None)?;
            }
            Col::OptI32(v) => {
                let (vals, def) = levels(v);
                w.typed::<Int32Type>()
                    .write_batch(&vals, Some(&def), None)?;
            }
            Col::OptI64(v) => {
                let (vals, def) = levels(v);
                w.typed::<Int64Type>()
                    .write_batch(&vals, Some(&def), None)?;
            }
            Col::Bool(v) => {
                w.typed::<BoolType>().write_batch(v, None, None)?;
            }
            Col::Str(v) => {
                let vals: Vec<ByteArray> = v.iter().map(|s| ByteArray::from(s.as_str())).collect();
                w.typed::<ByteArrayType>().write_batch(&vals, None, None)?;
            }
            Col::OptStr(v) => {
                let def: Vec<i16> = v.iter().map(|x| x.is_some() as i16).collect();
                let vals: Vec<ByteArray> = v
                    .iter()
                    .flatten()
                    .map(|s| ByteArray::from(s.as_str()))
                    .collect();
                w.typed::<ByteArrayType>()
                    .write_batch(&vals, Some(&def), None)?;
            }
            Col::StrList(rows) => {
                // REQUIRED group (LIST) { REPEATED group list { REQUIRED element } }:
                // an empty list is one level pair (def 0); each element has
                // def 1, rep 0 for a row's first and 1 for the rest.
                let (mut vals, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
                for row in rows {
                    if row.is_empty() {
                        def.push(0);
                        rep.push(0);
                    }
                    for (k, s) in row.iter().enumerate() {
                        vals.push(ByteArray::from(s.as_str()));
                        def.push(1);
                        rep.push((k > 0) as i16);
                    }
                }
                w.typed::<ByteArrayType>()
                    .write_batch(&vals, Some(&def), Some(&rep))?;
            }
        }
        w.close()?;
    }
    Ok(())
}
