//! DDL text, pragmas and open-time validation of dsh's SQLite schemas 15, 17 and 18
//! (persistence spec §5.1–§5.4).

use rusqlite::Connection;

use super::{SchemaVersion, SqliteError};

/// `PRAGMA application_id` of every dsh session database (ASCII "DSHP").
pub const APPLICATION_ID: i64 = 0x4453_4850;

/// The exact text dsh 15 passes to `exec` on every open (8-space indentation inside a template
/// literal, `agent_preset    TEXT` with 4 spaces, and trailing whitespace after the last
/// statement, which SQLite keeps in `sqlite_schema.sql`).
pub const DDL_15: &str = "
      CREATE TABLE IF NOT EXISTS persistence_state (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        store_id  TEXT NOT NULL
      ) STRICT;

      CREATE TABLE IF NOT EXISTS sessions (
        id               TEXT PRIMARY KEY,
        version          INTEGER NOT NULL,
        created_at       INTEGER NOT NULL,
        cwd              TEXT,
        parent_session   TEXT,
        seed_length      INTEGER,
        origin           TEXT,
        delegation_depth INTEGER,
        agent_preset    TEXT,
        incarnation      TEXT NOT NULL,
        revision         INTEGER NOT NULL
      ) STRICT;

      CREATE TABLE IF NOT EXISTS events (
        session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq               INTEGER NOT NULL,
        type              TEXT NOT NULL,
        time              INTEGER NOT NULL,
        data              TEXT NOT NULL,
        source_event_seqs TEXT,
        surface_op        TEXT,
        ignorable         INTEGER,
        PRIMARY KEY (session_id, seq)
      ) STRICT
    ";

/// Upstream dsh's `resources/sql/schema.sql` at schema 17.
pub const DDL_17: &str = "CREATE TABLE persistence_state (
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  store_id  TEXT NOT NULL
) STRICT;

CREATE TABLE sessions (
  id               TEXT PRIMARY KEY,
  version          INTEGER NOT NULL,
  created_at       INTEGER NOT NULL,
  cwd              TEXT,
  parent_session   TEXT,
  seed_length      INTEGER,
  origin           TEXT,
  delegation_depth INTEGER,
  agent_preset     TEXT,
  incarnation      TEXT NOT NULL,
  revision         INTEGER NOT NULL
) STRICT;

CREATE TABLE events (
  session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq               INTEGER NOT NULL,
  type              TEXT NOT NULL,
  time              INTEGER NOT NULL,
  data              ANY NOT NULL,
  source_event_seqs ANY,
  surface_op        TEXT,
  ignorable         INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)),
  PRIMARY KEY (session_id, seq)
) STRICT;
";

/// The fork's `resources/sql/schema.sql` at schema 18 (17 plus `sessions.owner`).
pub const DDL_18: &str = "CREATE TABLE persistence_state (
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  store_id  TEXT NOT NULL
) STRICT;

CREATE TABLE sessions (
  id               TEXT PRIMARY KEY,
  version          INTEGER NOT NULL,
  created_at       INTEGER NOT NULL,
  cwd              TEXT,
  parent_session   TEXT,
  seed_length      INTEGER,
  origin           TEXT,
  delegation_depth INTEGER,
  agent_preset     TEXT,
  owner            TEXT,
  incarnation      TEXT NOT NULL,
  revision         INTEGER NOT NULL
) STRICT;

CREATE TABLE events (
  session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq               INTEGER NOT NULL,
  type              TEXT NOT NULL,
  time              INTEGER NOT NULL,
  data              ANY NOT NULL,
  source_event_seqs ANY,
  surface_op        TEXT,
  ignorable         INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)),
  PRIMARY KEY (session_id, seq)
) STRICT;
";

/// The DDL text dsh executes to create a database of `version`.
pub fn ddl(version: SchemaVersion) -> &'static str {
    match version {
        SchemaVersion::V15 => DDL_15,
        SchemaVersion::V17 => DDL_17,
        SchemaVersion::V18 => DDL_18,
    }
}

/// One row of `SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT GLOB
/// 'sqlite_*' ORDER BY type, name`, with `sql` whitespace-normalized as dsh does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaObject {
    /// `table`, `index`, `trigger` or `view`.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// Table the object belongs to.
    pub tbl_name: String,
    /// `sql` with every whitespace run collapsed to one space, trimmed.
    pub sql: String,
}

/// Collapses every whitespace run to one space and trims (dsh's `normalizeSql`).
pub fn normalize_sql(sql: &str) -> String {
    sql.split(is_js_whitespace)
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// JavaScript's `\s` class (Unicode White_Space plus U+FEFF).
fn is_js_whitespace(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// Reads the user schema objects of a database, normalized as dsh compares them.
pub fn schema_objects(conn: &Connection) -> rusqlite::Result<Vec<SchemaObject>> {
    let mut stmt = conn.prepare(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*' ORDER BY type, name",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok(SchemaObject {
            kind: row.get(0)?,
            name: row.get(1)?,
            tbl_name: row.get(2)?,
            sql: normalize_sql(&row.get::<_, Option<String>>(3)?.unwrap_or_default()),
        })
    })?;
    rows.collect()
}

/// The canonical schema objects of `version`, built as dsh builds them: by running the DDL on
/// an in-memory database.
pub fn expected_schema_objects(version: SchemaVersion) -> rusqlite::Result<Vec<SchemaObject>> {
    let conn = Connection::open_in_memory()?;
    conn.execute_batch("PRAGMA foreign_keys = ON")?;
    conn.execute_batch(ddl(version))?;
    schema_objects(&conn)
}

/// The tables and columns dsh 15 reads (checked at 15, where dsh compares no schema text).
const REQUIRED_15: [(&str, &[&str]); 3] = [
    ("persistence_state", &["singleton", "store_id"]),
    (
        "sessions",
        &[
            "id",
            "version",
            "created_at",
            "cwd",
            "parent_session",
            "seed_length",
            "origin",
            "delegation_depth",
            "agent_preset",
            "incarnation",
            "revision",
        ],
    ),
    (
        "events",
        &[
            "session_id",
            "seq",
            "type",
            "time",
            "data",
            "source_event_seqs",
            "surface_op",
            "ignorable",
        ],
    ),
];

/// The header facts every dsh open reads inside its validation transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// `PRAGMA user_version`.
    pub user_version: i64,
    /// `PRAGMA application_id`.
    pub application_id: i64,
    /// Number of schema objects whose name does not start with `sqlite_`.
    pub user_objects: i64,
}

/// Reads [`Identity`].
pub fn read_identity(conn: &Connection) -> rusqlite::Result<Identity> {
    let user_version = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let application_id = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let user_objects = conn.query_row(
        "SELECT COUNT(*) FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*'",
        [],
        |r| r.get(0),
    )?;
    Ok(Identity {
        user_version,
        application_id,
        user_objects,
    })
}

/// Applies dsh's open-time checks to an existing database and returns its schema version.
///
/// `expected` restricts the accepted versions (`None` accepts 15, 17 and 18). The checks are
/// dsh's: an unversioned database is refused (dsh would initialise an empty one, which an
/// importer must not do), a foreign `user_version` is incompatible, the application id must be
/// `0x44534850`, and the schema objects must be the required ones (at 17 and 18 exactly the
/// canonical ones, whitespace aside; at 15 the three tables with the columns dsh reads).
pub fn validate(
    conn: &Connection,
    path: &str,
    expected: Option<SchemaVersion>,
) -> Result<SchemaVersion, SqliteError> {
    let sql_err = |context: &'static str| {
        let path = path.to_owned();
        move |source| SqliteError::Sqlite {
            path,
            context,
            source,
        }
    };
    let identity = read_identity(conn).map_err(|e| classify_open_error(path, e))?;
    if identity.user_version == 0 {
        return Err(SqliteError::Unversioned {
            path: path.to_owned(),
            application_id: identity.application_id,
            user_objects: identity.user_objects,
        });
    }
    let version = match SchemaVersion::from_user_version(identity.user_version) {
        Some(v) if expected.is_none_or(|e| e == v) => v,
        _ => {
            return Err(SqliteError::IncompatibleVersion {
                path: path.to_owned(),
                found: identity.user_version,
                accepted: match expected {
                    Some(v) => vec![v],
                    None => SchemaVersion::ALL.to_vec(),
                },
            });
        }
    };
    if identity.application_id != APPLICATION_ID {
        return Err(SqliteError::ForeignApplicationId {
            path: path.to_owned(),
            found: identity.application_id,
        });
    }
    match version {
        SchemaVersion::V15 => {
            for (table, columns) in REQUIRED_15 {
                let kind: Option<String> = conn
                    .query_row(
                        "SELECT type FROM sqlite_schema WHERE name = ?1",
                        [table],
                        |r| r.get(0),
                    )
                    .map(Some)
                    .or_else(|e| match e {
                        rusqlite::Error::QueryReturnedNoRows => Ok(None),
                        other => Err(other),
                    })
                    .map_err(sql_err("reading the schema"))?;
                if kind.as_deref() != Some("table") {
                    return Err(SqliteError::SchemaMismatch {
                        path: path.to_owned(),
                        version,
                        detail: format!("table `{table}` is missing"),
                    });
                }
                let mut stmt = conn
                    .prepare("SELECT name FROM pragma_table_info(?1)")
                    .map_err(sql_err("reading the schema"))?;
                let present: Vec<String> = stmt
                    .query_map([table], |r| r.get(0))
                    .and_then(|rows| rows.collect())
                    .map_err(sql_err("reading the schema"))?;
                if let Some(missing) = columns.iter().find(|c| !present.iter().any(|p| p == *c)) {
                    return Err(SqliteError::SchemaMismatch {
                        path: path.to_owned(),
                        version,
                        detail: format!("table `{table}` has no column `{missing}`"),
                    });
                }
            }
        }
        SchemaVersion::V17 | SchemaVersion::V18 => {
            let found = schema_objects(conn).map_err(sql_err("reading the schema"))?;
            let wanted = expected_schema_objects(version)
                .map_err(sql_err("building the canonical schema"))?;
            if found != wanted {
                return Err(SqliteError::SchemaMismatch {
                    path: path.to_owned(),
                    version,
                    detail: describe_schema_difference(&found, &wanted),
                });
            }
        }
    }
    Ok(version)
}

fn describe_schema_difference(found: &[SchemaObject], wanted: &[SchemaObject]) -> String {
    for w in wanted {
        match found.iter().find(|f| f.kind == w.kind && f.name == w.name) {
            None => return format!("{} `{}` is missing", w.kind, w.name),
            Some(f) if f != w => {
                return format!(
                    "{} `{}` differs from the canonical definition: found `{}`",
                    w.kind, w.name, f.sql
                );
            }
            Some(_) => {}
        }
    }
    match found
        .iter()
        .find(|f| !wanted.iter().any(|w| w.kind == f.kind && w.name == f.name))
    {
        Some(extra) => format!("unexpected {} `{}`", extra.kind, extra.name),
        None => "schema objects differ".to_owned(),
    }
}

/// Maps an error from the first statements on a file to a typed error.
pub fn classify_open_error(path: &str, error: rusqlite::Error) -> SqliteError {
    classify(path, "reading the database header", error)
}

/// Maps an SQLite error on a file being read to a typed error: `SQLITE_NOTADB` and
/// `SQLITE_CORRUPT` mean the file is not a readable database, `SQLITE_READONLY_ROLLBACK` and
/// `SQLITE_READONLY_RECOVERY` that it needs crash recovery first.
pub fn classify(path: &str, context: &'static str, error: rusqlite::Error) -> SqliteError {
    use rusqlite::ffi::{self, ErrorCode};
    if let rusqlite::Error::SqliteFailure(e, _) = &error
        && matches!(
            e.extended_code,
            ffi::SQLITE_READONLY_ROLLBACK | ffi::SQLITE_READONLY_RECOVERY
        )
    {
        return SqliteError::NeedsRecovery {
            path: path.to_owned(),
        };
    }
    match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => {
            SqliteError::NotADatabase {
                path: path.to_owned(),
                detail: error.to_string(),
            }
        }
        _ => SqliteError::Sqlite {
            path: path.to_owned(),
            context,
            source: error,
        },
    }
}

/// True when `s` matches dsh's UUID pattern
/// `^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$` (case-insensitive).
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 36 {
        return false;
    }
    for (i, &c) in b.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => c == b'-',
            14 => (b'1'..=b'8').contains(&c),
            19 => matches!(c.to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b'),
            _ => c.is_ascii_hexdigit(),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// A random version-4 UUID in lowercase, drawn from SQLite's randomness source (seeded from the
/// operating system), as `crypto.randomUUID()` would produce.
pub fn random_uuid(conn: &Connection) -> rusqlite::Result<String> {
    let mut bytes: Vec<u8> = conn.query_row("SELECT randomblob(16)", [], |r| r.get(0))?;
    bytes.resize(16, 0);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_pattern() {
        assert!(is_uuid("876d0f42-914f-47b7-881d-31badb7174eb"));
        assert!(is_uuid("876D0F42-914F-47B7-881D-31BADB7174EB"));
        assert!(!is_uuid("876d0f42-914f-07b7-881d-31badb7174eb"));
        assert!(!is_uuid("876d0f42-914f-47b7-c81d-31badb7174eb"));
        assert!(!is_uuid("not-a-uuid"));
        let conn = Connection::open_in_memory().unwrap();
        let a = random_uuid(&conn).unwrap();
        assert!(is_uuid(&a), "{a}");
        assert_ne!(a, random_uuid(&conn).unwrap());
    }

    #[test]
    fn normalized_canonical_rows_match_the_spec() {
        let rows = expected_schema_objects(SchemaVersion::V18).unwrap();
        let names: Vec<_> = rows
            .iter()
            .map(|r| (r.kind.as_str(), r.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("table", "events"),
                ("table", "persistence_state"),
                ("table", "sessions")
            ]
        );
        assert_eq!(
            rows[1].sql,
            "CREATE TABLE persistence_state ( singleton INTEGER PRIMARY KEY CHECK (singleton = 1), store_id TEXT NOT NULL ) STRICT"
        );
        assert!(
            rows[2]
                .sql
                .contains("agent_preset TEXT, owner TEXT, incarnation")
        );
    }
}
