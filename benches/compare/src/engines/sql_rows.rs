//! The reads and the update of the two SQL stores, SQLite (rusqlite) and
//! DuckDB (duckdb-rs, whose API copies rusqlite's): the same statements
//! against the same tables, `t` and `amount_versions`, written once.
//!
//! `sql_row_methods!()` expands inside `impl Engine for X`, where `X` has
//! `fn with<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>)`
//! (a pooled connection) and the crate's `params!`, its optional-row
//! extension trait and a `fn err(impl Display) -> String` are in scope.
//! Statements are prepared once per connection (`prepare_cached`).

macro_rules! sql_row_methods {
    () => {
        fn get(&self, k: &Key) -> Result<Option<f64>> {
            self.with(|c| {
                c.prepare_cached(
                    "SELECT * FROM t WHERE card_id = ? AND seller_id = ? AND device_id = ? AND order_no = ?",
                )
                .map_err(err)?
                .query_row(params![k.card_id, k.seller_id, k.device_id, k.order_no], |r| {
                    r.get::<_, Option<f64>>(4)
                })
                .optional()
                .map(|o| o.flatten())
                .map_err(err)
            })
        }

        fn card_rows(&self, card_id: i64, limit: usize) -> Result<usize> {
            self.with(|c| {
                let mut st = c
                    .prepare_cached("SELECT * FROM t WHERE card_id = ? ORDER BY seller_id, device_id, order_no LIMIT ?")
                    .map_err(err)?;
                let mut rows = st.query(params![card_id, limit as i64]).map_err(err)?;
                let mut n = 0;
                while rows.next().map_err(err)?.is_some() {
                    n += 1;
                }
                Ok(n)
            })
        }

        fn update(&self, k: &Key, amount: f64, category: Option<&str>, device_time: Option<i64>) -> Result<()> {
            self.with(|c| {
                let tx = c.transaction().map_err(err)?;
                tx.prepare_cached(
                    "UPDATE t SET amount = ?, category = coalesce(?, category), device_time = coalesce(?, device_time) \
                     WHERE card_id = ? AND seller_id = ? AND device_id = ? AND order_no = ?",
                )
                .map_err(err)?
                .execute(params![
                    amount,
                    category,
                    device_time,
                    k.card_id,
                    k.seller_id,
                    k.device_id,
                    k.order_no
                ])
                .map_err(err)?;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_err(err)?
                    .as_millis() as i64;
                tx.prepare_cached("INSERT OR REPLACE INTO amount_versions VALUES (?, ?, ?, ?, ?, ?)")
                    .map_err(err)?
                    .execute(params![
                        k.card_id,
                        k.seller_id,
                        k.device_id,
                        k.order_no,
                        now,
                        amount
                    ])
                    .map_err(err)?;
                tx.commit().map_err(err)
            })
        }

        fn versions(&self, k: &Key, n: usize) -> Result<Vec<f64>> {
            self.with(|c| {
                let mut st = c
                    .prepare_cached(
                        "SELECT amount FROM amount_versions WHERE card_id = ? AND seller_id = ? AND device_id = ? \
                         AND order_no = ? ORDER BY version DESC LIMIT ?",
                    )
                    .map_err(err)?;
                let rows = st
                    .query_map(
                        params![k.card_id, k.seller_id, k.device_id, k.order_no, n as i64],
                        |r| r.get::<_, f64>(0),
                    )
                    .map_err(err)?;
                rows.collect::<std::result::Result<Vec<_>, _>>().map_err(err)
            })
        }
    };
}
