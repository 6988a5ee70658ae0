use super::*;
use crate::trace::TracePrompt;

fn req(line: u32, ts: u64, session: Option<u64>, ids: Vec<u64>) -> TraceRequest {
    TraceRequest::new(
        0,
        line,
        ts,
        session,
        line % 3,
        100 + line,
        7,
        ids.into(),
        512,
    )
}

/// Rows with every kind of field: ids inline and far over the 15 inline bytes, `u64::MAX`
/// ids, no ids; sessions named by raw 64-bit ids, by small ones and none; rare fields.
fn varied() -> Vec<TraceRequest> {
    let scattered: Vec<u64> = (0..40).map(|i| i * 1_000_003).collect();
    let mut rows = vec![
        req(1, 10, Some(u64::MAX), vec![0, 1, 2, 3]),
        req(2, 10, None, scattered.clone()),
        req(3, 20, Some(7), vec![]),
        req(4, 20, Some(u64::MAX), vec![u64::MAX, 0, u64::MAX - 1]),
        req(5, 30, Some(0x8000_0000_0000_0001), (5..400).collect()),
        req(6, 40, None, vec![3]),
        req(
            7,
            50,
            Some(7),
            (0..200).rev().map(|i| i * 1_000_003).collect(),
        ),
    ];
    rows[1].set_delay_us(Some(u64::MAX));
    rows[3].set_prompt(Some(TracePrompt::Text("hi".into())));
    rows[6].set_extra(Some(serde_json::json!({"k": [1, 2]})));
    rows
}

/// `want` with each row's index set to its position.
fn indexed(mut want: Vec<TraceRequest>) -> Vec<TraceRequest> {
    for (i, r) in want.iter_mut().enumerate() {
        r.index = i as u32;
    }
    want
}

#[test]
fn a_row_is_32_bytes() {
    assert_eq!(std::mem::size_of::<Row>(), 32);
}

#[test]
fn rows_read_back_as_pushed() {
    let want = indexed(varied());
    assert!(want[1].hash_ids.heap_bytes() > 0, "over the inline bytes");
    let rows: TraceRows = want.iter().cloned().collect();
    assert_eq!(rows.len(), want.len());
    assert_eq!(rows.to_vec(), want);
    assert_eq!(rows.iter().rev().collect::<Vec<_>>().len(), want.len());
    for (i, w) in want.iter().enumerate() {
        assert_eq!(rows.get(i).as_ref(), Some(w));
        let r = rows.row(i);
        assert_eq!(r.to_request(), *w);
        assert_eq!(
            (r.index(), r.line(), r.timestamp_us(), r.session(), r.turn()),
            (i as u32, w.line, w.timestamp_us, w.session, w.turn)
        );
        assert_eq!(
            (r.input_tokens(), r.output_tokens()),
            (w.input_tokens, w.output_tokens)
        );
        assert_eq!(r.delay_us(), w.delay_us());
        assert_eq!(r.is_first_turn(), w.is_first_turn());
    }
    assert_eq!(rows.get(want.len()), None);
    assert_eq!(rows.last().as_ref(), want.last());
    assert_eq!(TraceRows::new().last(), None);
    assert_eq!(rows.block_size(), Some(512));
    // One number per session, the same on every row of it.
    let n = |i: usize| rows.row(i).session_number();
    assert_eq!(
        (n(0), n(3), n(2), n(6), n(1)),
        (Some(0), Some(0), Some(1), Some(1), None)
    );
    assert_eq!(rows.session_numbers(), 3);
}

#[test]
fn a_row_of_another_block_size_is_refused() {
    let mut rows: TraceRows = varied().into_iter().collect();
    let mut r = req(9, 60, None, vec![1]);
    r.block_size = 16;
    assert_eq!(
        rows.push(r),
        Err(RowsError::BlockSize {
            expected: 512,
            found: 16
        })
    );
    assert_eq!(
        rows.update(0, |r| r.block_size = 16),
        Err(RowsError::BlockSize {
            expected: 512,
            found: 16
        })
    );
    rows.set_block_size(16);
    assert!(rows.iter().all(|r| r.block_size == 16));
}

#[test]
fn updates_store_every_field_and_reuse_the_ids_room_when_they_fit() {
    let mut want = indexed(varied());
    let mut rows: TraceRows = want.iter().cloned().collect();
    let arena = rows.ids.len();
    // Shorter ids go where the old ones were; the arena does not grow.
    rows.update(4, |r| r.hash_ids.truncate(3)).unwrap();
    want[4].hash_ids.truncate(3);
    assert_eq!(rows.ids.len(), arena);
    // Longer ones go to the end, even one byte longer (3 bytes, then 4: the gap 200 takes
    // two), leaving the next row's ids as they were.
    let longer: HashIds = vec![200, 201, 202, 203].into();
    assert_eq!(longer.bytes().len(), want[0].hash_ids.bytes().len() + 1);
    rows.update(0, |r| r.hash_ids = longer.clone()).unwrap();
    want[0].hash_ids = longer;
    rows.update(5, |r| r.hash_ids = (0..50).map(|i| i * 977).collect())
        .unwrap();
    want[5].hash_ids = (0..50).map(|i| i * 977).collect();
    assert!(rows.ids.len() > arena);
    // Every other field, and rare fields added and removed.
    rows.update(2, |r| {
        r.session = Some(u64::MAX - 5);
        r.turn = 9;
        r.line = 70;
        r.timestamp_us = u64::MAX;
        r.input_tokens = u32::MAX;
        r.output_tokens = 0;
        r.set_delay_us(Some(3));
    })
    .unwrap();
    want[2].session = Some(u64::MAX - 5);
    want[2].turn = 9;
    want[2].line = 70;
    want[2].timestamp_us = u64::MAX;
    want[2].input_tokens = u32::MAX;
    want[2].output_tokens = 0;
    want[2].set_delay_us(Some(3));
    rows.update(1, |r| r.set_delay_us(None)).unwrap();
    want[1].set_delay_us(None);
    rows.update(6, |r| r.hash_ids.clear()).unwrap();
    want[6].hash_ids.clear();
    assert_eq!(rows.to_vec(), want);
    let rare: Vec<u32> = rows.rare.keys().copied().collect();
    assert_eq!(rare, [2, 3, 6], "row 1's emptied rare fields are gone");
    // Compacting the arena keeps every row's ids.
    rows.dead = rows.ids.len();
    rows.shrink_to_fit();
    assert_eq!(rows.dead, 0);
    assert_eq!(rows.to_vec(), want);
}

#[test]
fn retain_and_truncate_keep_each_rows_fields_with_it() {
    let all = varied();
    let mut rows: TraceRows = all.iter().cloned().collect();
    rows.retain(|r| r.line() % 2 == 0);
    let kept: Vec<TraceRequest> = all.iter().filter(|r| r.line % 2 == 0).cloned().collect();
    assert_eq!(rows.to_vec(), indexed(kept.clone()));
    assert!(rows.dead > 0, "dropped rows' ids are counted unused");
    rows.shrink_to_fit();
    assert_eq!(rows.dead, 0, "more than half the arena was unused: copied");
    assert_eq!(rows.to_vec(), indexed(kept.clone()));
    rows.truncate(1);
    assert_eq!(rows.to_vec(), indexed(kept[..1].to_vec()));
    // The row with the delay was kept at position 0, and keeps it.
    assert_eq!(rows.row(0).delay_us(), Some(u64::MAX));
    rows.push(all[6].clone()).unwrap();
    assert_eq!(rows.get(1).unwrap().extra(), all[6].extra());
}

#[test]
fn sort_is_stable_and_moves_rare_fields_with_their_rows() {
    let all = varied();
    let mut rows: TraceRows = all.iter().cloned().collect();
    // Descending time; equal times keep their order.
    rows.sort_by_key(|r| std::cmp::Reverse(r.timestamp_us()));
    let mut want = all.clone();
    want.sort_by_key(|r| std::cmp::Reverse(r.timestamp_us));
    assert_eq!(rows.to_vec(), indexed(want.clone()));
    assert_eq!(
        rows.iter().map(|r| r.line).collect::<Vec<_>>(),
        [7, 6, 5, 3, 4, 1, 2]
    );
    // Sorted already: nothing moves.
    rows.sort_by_key(|r| std::cmp::Reverse(r.timestamp_us()));
    assert_eq!(rows.to_vec(), indexed(want));
}

#[test]
fn equality_reads_rows_not_the_arena() {
    let mut a: TraceRows = varied().into_iter().collect();
    let b = a.clone();
    a.update(1, |r| r.hash_ids.truncate(2)).unwrap();
    assert_ne!(a, b);
    let ids = b.get(1).unwrap().hash_ids;
    a.update(1, |r| r.hash_ids = ids).unwrap();
    assert_eq!(a, b, "same rows, ids stored elsewhere");
    assert_eq!(format!("{b:?}"), format!("{:?}", b.to_vec()));
}

#[test]
fn permute_puts_each_row_where_the_order_says() {
    let rows: Vec<u32> = (0..9).collect();
    for order in [
        vec![0u32, 1, 2, 3, 4, 5, 6, 7, 8],
        vec![8, 7, 6, 5, 4, 3, 2, 1, 0],
        vec![1, 2, 0, 4, 3, 5, 8, 6, 7],
    ] {
        let mut got = rows.clone();
        permute(&mut got, order.clone());
        let want: Vec<u32> = order.iter().map(|&i| rows[i as usize]).collect();
        assert_eq!(got, want);
    }
}
