//! Events as frames, and back (pure: no I/O).
//!
//! A batch's records are encoded with the channel's [`RecordCodec`] one after another, its
//! count beside them, so decoding knows how many to expect and refuses bytes that are short
//! or left over. Control events map field for field. What a frame costs in permits is
//! decided here too ([`Cost`]), so the sender and the receiver cannot disagree about it.

use crate::runtime::codec::RecordCodec;
use crate::runtime::event::{BarrierKind, CheckpointBarrier, Event, WatermarkStatus};

use super::proto::{self, frame::Kind};
use super::ChannelId;

/// The permits an event takes: one batch and its records for a batch, nothing for the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cost {
    /// Batches (0 or 1).
    pub batches: u32,
    /// Records.
    pub records: u64,
}

impl Cost {
    /// What `event` takes.
    pub fn of<T>(event: &Event<T>) -> Cost {
        match event {
            Event::Batch(b) | Event::TimestampedBatch(b, _) => Cost {
                batches: 1,
                records: b.len() as u64,
            },
            _ => Cost::default(),
        }
    }

    /// Whether it takes any permit.
    pub fn is_free(self) -> bool {
        self.batches == 0 && self.records == 0
    }
}

/// `event` on `channel` as a frame; a batch's records encoded by `codec`. An error is the
/// codec's message.
pub fn to_frame<T>(
    channel: ChannelId,
    event: Event<T>,
    codec: &dyn RecordCodec<T>,
) -> Result<proto::Frame, String> {
    let kind = match event {
        Event::Batch(records) => batch(channel, &records, Vec::new(), false, codec)?,
        Event::TimestampedBatch(records, timestamps) => {
            batch(channel, &records, timestamps, true, codec)?
        }
        Event::Watermark(watermark) => Kind::Watermark(proto::Watermark { channel, watermark }),
        Event::WatermarkStatus(s) => Kind::WatermarkStatus(proto::WatermarkStatus {
            channel,
            idle: s == WatermarkStatus::Idle,
        }),
        Event::Barrier(b) => Kind::Barrier(proto::Barrier {
            channel,
            barrier: Some(barrier_to_proto(b)),
        }),
        Event::EndOfInput => Kind::EndOfInput(proto::EndOfInput { channel }),
    };
    Ok(proto::Frame { kind: Some(kind) })
}

fn batch<T>(
    channel: ChannelId,
    records: &[T],
    timestamps: Vec<u64>,
    timestamped: bool,
    codec: &dyn RecordCodec<T>,
) -> Result<Kind, String> {
    let mut payload = Vec::new();
    codec
        .encode(records, &mut payload)
        .map_err(|e| e.to_string())?;
    Ok(Kind::Batch(proto::Batch {
        channel,
        records: records.len() as u32,
        payload,
        timestamps,
        timestamped,
    }))
}

/// An unaligned checkpoint's announcement of `barrier` on `channel`.
pub fn announcement(channel: ChannelId, barrier: CheckpointBarrier) -> proto::Frame {
    proto::Frame {
        kind: Some(Kind::Announcement(proto::Announcement {
            channel,
            barrier: Some(barrier_to_proto(barrier)),
        })),
    }
}

/// Permits `cost` returned (or granted) for `channel`.
pub fn permits(channel: ChannelId, cost: Cost) -> proto::Frame {
    proto::Frame {
        kind: Some(Kind::Permits(proto::Permits {
            channel,
            batches: cost.batches,
            records: cost.records,
        })),
    }
}

/// The channel a frame is for.
pub fn channel_of(kind: &Kind) -> ChannelId {
    match kind {
        Kind::Batch(b) => b.channel,
        Kind::Watermark(w) => w.channel,
        Kind::WatermarkStatus(s) => s.channel,
        Kind::Barrier(b) => b.channel,
        Kind::EndOfInput(e) => e.channel,
        Kind::Announcement(a) => a.channel,
        Kind::Permits(p) => p.channel,
        Kind::Close(c) => c.channel,
    }
}

/// The frame that closes `channel`: its sending end was dropped.
pub fn close(channel: ChannelId) -> proto::Frame {
    proto::Frame {
        kind: Some(Kind::Close(proto::Close { channel })),
    }
}

/// What arrived for an input: an event in order, or an announcement for the priority lane.
#[derive(Debug)]
pub enum Inbound<T> {
    /// An event of the channel, in order.
    Event(Event<T>),
    /// An unaligned checkpoint's announcement, which overtakes the channel's events.
    Announcement(CheckpointBarrier),
}

/// The event (or announcement) a frame carries; a batch decoded by `codec`. `Permits` are
/// not for an input: the caller handles them. An error says what did not decode.
pub fn from_frame<T>(kind: Kind, codec: &dyn RecordCodec<T>) -> Result<Inbound<T>, String> {
    let event = match kind {
        Kind::Batch(b) => {
            let what = format!("a batch of {} records on channel {}", b.records, b.channel);
            let mut records = Vec::with_capacity(b.records as usize);
            codec
                .decode(&b.payload, b.records as usize, &what, &mut records)
                .map_err(|e| e.to_string())?;
            if b.timestamped {
                if b.timestamps.len() != records.len() {
                    return Err(format!(
                        "{what}: {} timestamps for {} records",
                        b.timestamps.len(),
                        records.len()
                    ));
                }
                Event::TimestampedBatch(records, b.timestamps)
            } else {
                Event::Batch(records)
            }
        }
        Kind::Watermark(w) => Event::Watermark(w.watermark),
        Kind::WatermarkStatus(s) => Event::WatermarkStatus(if s.idle {
            WatermarkStatus::Idle
        } else {
            WatermarkStatus::Active
        }),
        Kind::Barrier(b) => Event::Barrier(barrier_from_proto(b.barrier, b.channel)?),
        Kind::EndOfInput(_) => Event::EndOfInput,
        Kind::Announcement(a) => {
            return Ok(Inbound::Announcement(barrier_from_proto(
                a.barrier, a.channel,
            )?))
        }
        Kind::Permits(p) => {
            return Err(format!(
                "permits for channel {} where an event was expected",
                p.channel
            ))
        }
        Kind::Close(c) => {
            return Err(format!(
                "a close of channel {} where an event was expected",
                c.channel
            ))
        }
    };
    Ok(Inbound::Event(event))
}

fn barrier_to_proto(b: CheckpointBarrier) -> proto::CheckpointBarrier {
    let kind = match b.kind {
        BarrierKind::Checkpoint => proto::BarrierKind::Checkpoint,
        BarrierKind::Savepoint => proto::BarrierKind::Savepoint,
        BarrierKind::Stop { drain: false } => proto::BarrierKind::Stop,
        BarrierKind::Stop { drain: true } => proto::BarrierKind::StopAndDrain,
    };
    proto::CheckpointBarrier {
        id: b.id,
        timestamp_ms: b.timestamp_ms,
        kind: kind as i32,
    }
}

fn barrier_from_proto(
    b: Option<proto::CheckpointBarrier>,
    channel: ChannelId,
) -> Result<CheckpointBarrier, String> {
    let b = b.ok_or_else(|| format!("a barrier without its checkpoint on channel {channel}"))?;
    let kind = match proto::BarrierKind::try_from(b.kind) {
        Ok(proto::BarrierKind::Checkpoint) => BarrierKind::Checkpoint,
        Ok(proto::BarrierKind::Savepoint) => BarrierKind::Savepoint,
        Ok(proto::BarrierKind::Stop) => BarrierKind::Stop { drain: false },
        Ok(proto::BarrierKind::StopAndDrain) => BarrierKind::Stop { drain: true },
        Ok(proto::BarrierKind::Unspecified) | Err(_) => {
            return Err(format!(
                "barrier {} on channel {channel} has an unknown kind {}",
                b.id, b.kind
            ))
        }
    };
    Ok(CheckpointBarrier {
        id: b.id,
        timestamp_ms: b.timestamp_ms,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::codec::TypeRegistry;

    fn round_trip(e: Event<(String, u64)>) -> Event<(String, u64)> {
        let codec = TypeRegistry::with_common_types()
            .codec::<(String, u64)>()
            .unwrap();
        let frame = to_frame(7, e, codec.as_ref()).unwrap();
        let kind = frame.kind.unwrap();
        assert_eq!(channel_of(&kind), 7);
        match from_frame(kind, codec.as_ref()).unwrap() {
            Inbound::Event(e) => e,
            Inbound::Announcement(b) => panic!("an announcement {b:?}"),
        }
    }

    #[test]
    fn every_event_survives_the_wire() {
        let recs = vec![("a".to_string(), 1u64), ("bb".to_string(), u64::MAX)];
        assert!(matches!(round_trip(Event::Batch(recs.clone())), Event::Batch(b) if b == recs));
        assert!(matches!(
            round_trip(Event::TimestampedBatch(recs.clone(), vec![5, 6])),
            Event::TimestampedBatch(b, t) if b == recs && t == [5, 6]
        ));
        assert!(matches!(
            round_trip(Event::Watermark(42)),
            Event::Watermark(42)
        ));
        assert!(matches!(
            round_trip(Event::WatermarkStatus(WatermarkStatus::Idle)),
            Event::WatermarkStatus(WatermarkStatus::Idle)
        ));
        assert!(matches!(round_trip(Event::EndOfInput), Event::EndOfInput));
        for kind in [
            BarrierKind::Checkpoint,
            BarrierKind::Savepoint,
            BarrierKind::Stop { drain: false },
            BarrierKind::Stop { drain: true },
        ] {
            let b = CheckpointBarrier {
                id: 9,
                timestamp_ms: 1234,
                kind,
            };
            assert!(matches!(round_trip(Event::Barrier(b)), Event::Barrier(x) if x == b));
        }
    }

    #[test]
    fn only_batches_cost_permits() {
        let b: Event<u32> = Event::Batch(vec![1, 2, 3]);
        assert_eq!(
            Cost::of(&b),
            Cost {
                batches: 1,
                records: 3
            }
        );
        assert!(Cost::of(&Event::<u32>::Watermark(1)).is_free());
        assert!(Cost::of(&Event::<u32>::EndOfInput).is_free());
        assert!(Cost::of(&Event::<u32>::Barrier(CheckpointBarrier::checkpoint(1, 0))).is_free());
    }

    #[test]
    fn a_batch_that_does_not_decode_is_an_error_naming_the_channel() {
        let codec = TypeRegistry::with_common_types().codec::<u64>().unwrap();
        let mut frame = to_frame(3, Event::Batch(vec![1u64, 2]), codec.as_ref())
            .unwrap()
            .kind
            .unwrap();
        if let Kind::Batch(b) = &mut frame {
            b.records = 5;
        }
        let e = from_frame(frame, codec.as_ref()).unwrap_err();
        assert!(e.contains("channel 3"), "{e}");
        let bad = Kind::Barrier(proto::Barrier {
            channel: 4,
            barrier: Some(proto::CheckpointBarrier {
                id: 1,
                timestamp_ms: 0,
                kind: 99,
            }),
        });
        let e = from_frame(bad, codec.as_ref()).unwrap_err();
        assert!(e.contains("unknown kind 99"), "{e}");
    }
}
