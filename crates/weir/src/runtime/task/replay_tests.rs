//! The decisions of an interleaved replay, without threads: what is handed out, what a
//! snapshot taken part-way records, and which channel a restored file is replayed as.

use super::*;
use crate::runtime::codec::TypeRegistry;

fn codec() -> Arc<dyn RecordCodec<u64>> {
    TypeRegistry::with_common_types().codec::<u64>().unwrap()
}

fn origins(senders: u32) -> Vec<ChannelOrigin> {
    (0..senders)
        .map(|sender| ChannelOrigin { edge: 0, sender })
        .collect()
}

/// A file of `batches` (each the records `from..to`, timestamped as `10 × record` if `ts`).
fn file(channel: u32, sender: u32, batches: &[(u64, u64)], ts: bool) -> ChannelStateFile {
    let batches = batches
        .iter()
        .map(|r| {
            let records: Vec<u64> = (r.0..r.1).collect();
            let mut data = Vec::new();
            codec().encode(&records, &mut data).unwrap();
            ChannelBatch {
                records: records.len() as u32,
                timestamped: ts,
                timestamps: if ts {
                    records.iter().map(|x| 10 * x).collect()
                } else {
                    vec![]
                },
                data,
            }
        })
        .collect();
    ChannelStateFile {
        subtask: 0,
        channel,
        edge: 0,
        sender,
        batches,
        schema: None,
    }
}

/// Records (with timestamps, if any) per channel of `events`.
fn by_channel(
    events: impl IntoIterator<Item = (usize, Event<u64>)>,
) -> Vec<Vec<(u64, Option<u64>)>> {
    let mut out = vec![Vec::new(); 2];
    for (c, e) in events {
        match e {
            Event::Batch(b) => out[c].extend(b.into_iter().map(|r| (r, None))),
            Event::TimestampedBatch(b, t) => {
                assert_eq!(b.len(), t.len());
                out[c].extend(b.into_iter().zip(t).map(|(r, t)| (r, Some(t))))
            }
            _ => panic!("only batches are replayed"),
        }
    }
    out
}

/// What a capture recorded, decoded, per channel.
fn recorded(capture: &mut ChannelCapture<u64>) -> Vec<Vec<(u64, Option<u64>)>> {
    let mut events = Vec::new();
    for f in capture.take(0) {
        for b in f.batches {
            let mut records = Vec::new();
            codec()
                .decode(&b.data, b.records as usize, "test", &mut records)
                .unwrap();
            let e = if b.timestamped {
                Event::TimestampedBatch(records, b.timestamps)
            } else {
                Event::Batch(records)
            };
            events.push((f.channel as usize, e));
        }
    }
    by_channel(events)
}

fn files() -> Vec<ChannelStateFile> {
    vec![
        file(0, 0, &[(0, 300), (300, 310)], false),
        file(1, 1, &[(1000, 1100)], true),
    ]
}

#[test]
fn hands_out_every_record_once_in_chunks_in_each_channels_order() {
    let mut r = RestoredChannels::new(files(), &origins(2), codec());
    assert!(!r.is_empty());
    let mut out = Vec::new();
    while let Some((c, e)) = r.next(128).unwrap() {
        let len = match &e {
            Event::Batch(b) | Event::TimestampedBatch(b, _) => b.len(),
            _ => unreachable!(),
        };
        assert!((1..=128).contains(&len), "a chunk of at most 128: {len}");
        out.push((c, e));
    }
    assert!(r.is_empty());
    let got = by_channel(out);
    assert_eq!(got[0], (0..310).map(|x| (x, None)).collect::<Vec<_>>());
    assert_eq!(
        got[1],
        (1000..1100).map(|x| (x, Some(10 * x))).collect::<Vec<_>>()
    );
}

#[test]
fn a_snapshot_at_any_point_records_exactly_what_was_not_handed_out() {
    let all = by_channel(RestoredChannels::new(files(), &origins(2), codec()).drain(100));
    // Snapshots after 0, 1, … chunks: handed out then recorded is each channel's records,
    // each once and in order; the replay goes on after the snapshot unchanged.
    for k in 0..=8 {
        let mut r = RestoredChannels::new(files(), &origins(2), codec());
        let before: Vec<_> = (0..k).map_while(|_| r.next(100).unwrap()).collect();
        let mut capture = ChannelCapture::new(codec(), origins(2));
        r.record_rest(&mut capture).unwrap();
        let rest = recorded(&mut capture);
        let before = by_channel(before);
        for c in 0..2 {
            let mut joined = before[c].clone();
            joined.extend(&rest[c]);
            assert_eq!(joined, all[c], "after {k} chunks, channel {c}");
        }
        let after = by_channel(r.drain(100));
        assert_eq!(
            after, rest,
            "after {k} chunks the replay hands out what was recorded"
        );
    }
}

#[test]
fn a_file_is_replayed_as_the_channel_of_its_sender_else_its_own_channel() {
    // Rescaled: the sender of channel 0 is now channel 1's, and a file names a channel
    // past the last one.
    let files = vec![file(0, 1, &[(0, 2)], false), file(5, 9, &[(7, 8)], false)];
    let mut r = RestoredChannels::new(files, &origins(2), codec());
    let got = by_channel(r.drain(10));
    assert_eq!(got[1], [(0, None), (1, None), (7, None)]);
    assert!(got[0].is_empty());
    let none = RestoredChannels::<u64>::new(Vec::new(), &origins(2), codec());
    assert!(none.is_empty());
}

#[test]
fn a_batch_that_does_not_decode_is_an_error_naming_its_file() {
    let mut f = file(1, 1, &[(0, 4)], false);
    f.batches[0].data.truncate(1);
    let mut r = RestoredChannels::new(vec![f], &origins(2), codec());
    let e = r.next(10).unwrap_err().to_string();
    assert!(e.contains("channel state of subtask 0 channel 1"), "{e}");
}

impl RestoredChannels<u64> {
    fn drain(&mut self, chunk: usize) -> Vec<(usize, Event<u64>)> {
        std::iter::from_fn(|| self.next(chunk).unwrap()).collect()
    }
}
