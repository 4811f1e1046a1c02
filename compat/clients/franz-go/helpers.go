package main

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// newClient is a client with franz-go's defaults plus the scenario's options.
func newClient(o options, opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{kgo.SeedBrokers(o.bootstrap...), kgo.ClientID("compat-franz-go")}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("cannot create the franz-go client: %w", err)
	}
	return cl, nil
}

func newAdmin(o options) (*kadm.Client, error) {
	cl, err := newClient(o)
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(cl), nil
}

// createTopic creates a topic (RF = cluster size) and waits until every
// partition has a leader, so the scenario starts from a usable topic.
func createTopic(ctx context.Context, adm *kadm.Client, o options, name string, partitions int32) error {
	resp, err := adm.CreateTopic(ctx, partitions, int16(o.brokers), nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	return awaitLeaders(ctx, adm, name)
}

func awaitLeaders(ctx context.Context, adm *kadm.Client, topics ...string) error {
	var last string
	for {
		md, err := adm.Metadata(ctx, topics...)
		last = fmt.Sprint(err)
		if err == nil {
			last = leaderless(md, topics)
			if last == "" {
				return nil
			}
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("topics never all had leaders (last: %s)", last)
		}
	}
}

// leaderless describes the first topic that is missing, errored or has a
// partition without a leader, or "" when all are ready.
func leaderless(md kadm.Metadata, topics []string) string {
	for _, t := range topics {
		td, ok := md.Topics[t]
		switch {
		case !ok:
			return t + " missing from metadata"
		case td.Err != nil:
			return fmt.Sprintf("%s: %v", t, td.Err)
		case len(td.Partitions) == 0:
			return t + " has no partitions"
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Sprintf("%s/%d: leader %d, error %v", t, p.Partition, p.Leader, p.Err)
			}
		}
	}
	return ""
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// testRecords are n records with keys, two headers (one binary) and explicit
// CreateTime timestamps a minute in the past, one millisecond apart.
func testRecords(topic string, n int) []*kgo.Record {
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{
			Topic: topic,
			Key:   []byte(fmt.Sprintf("key-%d", i)),
			Value: []byte(fmt.Sprintf("value-%d-%s", i, bytes.Repeat([]byte{'x'}, i%7))),
			Headers: []kgo.RecordHeader{
				{Key: "text", Value: []byte(fmt.Sprintf("h-%d", i))},
				{Key: "binary", Value: []byte{0x00, 0xff, byte(i), 0x80, 0x00}},
			},
			Timestamp: t0.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return recs
}

func produce(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	return nil
}

// consume polls until n records arrived or the context ends; fetch errors
// other than the context's own end fail the call.
func consume(ctx context.Context, cl *kgo.Client, n int) ([]*kgo.Record, error) {
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		for _, fe := range fs.Errors() {
			if ctx.Err() != nil {
				return got, fmt.Errorf("got %d of %d records before the deadline", len(got), n)
			}
			return got, fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		got = append(got, fs.Records()...)
		if ctx.Err() != nil {
			return got, fmt.Errorf("got %d of %d records before the deadline", len(got), n)
		}
	}
	return got, nil
}

// readAll reads a 1-partition topic from the beginning without a group.
func readAll(ctx context.Context, o options, topic string, n int) ([]*kgo.Record, error) {
	cl, err := newClient(o, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return consume(ctx, cl, n)
}

// sameRecords compares what was read with what was sent, starting at offset
// `from`: count, order, offsets, key, value, headers and timestamp.
func sameRecords(sent, got []*kgo.Record, from int64) error {
	if len(got) != len(sent) {
		return fmt.Errorf("read %d records, sent %d", len(got), len(sent))
	}
	for i, s := range sent {
		g := got[i]
		if g.Offset != from+int64(i) {
			return fmt.Errorf("record %d has offset %d, want %d", i, g.Offset, from+int64(i))
		}
		if !bytes.Equal(g.Key, s.Key) || !bytes.Equal(g.Value, s.Value) {
			return fmt.Errorf("record %d: read key %q value %q, sent key %q value %q", i, g.Key, g.Value, s.Key, s.Value)
		}
		if g.Timestamp.UnixMilli() != s.Timestamp.UnixMilli() {
			return fmt.Errorf("record %d: read timestamp %d, sent %d", i, g.Timestamp.UnixMilli(), s.Timestamp.UnixMilli())
		}
		if g.Attrs.TimestampType() != 0 {
			return fmt.Errorf("record %d: timestamp type %d, want 0 (CreateTime)", i, g.Attrs.TimestampType())
		}
		if err := sameHeaders(s.Headers, g.Headers); err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
	}
	return nil
}

func sameHeaders(sent, got []kgo.RecordHeader) error {
	if len(got) != len(sent) {
		return fmt.Errorf("read %d headers, sent %d", len(got), len(sent))
	}
	for j := range sent {
		if got[j].Key != sent[j].Key || !bytes.Equal(got[j].Value, sent[j].Value) {
			return fmt.Errorf("header %d: read %q=%x, sent %q=%x", j, got[j].Key, got[j].Value, sent[j].Key, sent[j].Value)
		}
	}
	return nil
}

// produceTo produces recs with a producer built from opts.
func produceTo(ctx context.Context, o options, recs []*kgo.Record, opts ...kgo.Opt) error {
	prod, err := newClient(o, opts...)
	if err != nil {
		return err
	}
	defer prod.Close()
	return produce(ctx, prod, recs)
}

// createAndProduce creates a 1-partition topic and produces recs (if any) to it.
func createAndProduce(ctx context.Context, o options, topic string, recs []*kgo.Record, opts ...kgo.Opt) error {
	adm, err := newAdmin(o)
	if err != nil {
		return err
	}
	defer adm.Close()
	if err := createTopic(ctx, adm, o, topic, 1); err != nil || len(recs) == 0 {
		return err
	}
	return produceTo(ctx, o, recs, opts...)
}

// produceAndVerify creates a topic, produces n test records with a producer
// built from opts, and reads them back exactly; it returns the sent records.
func produceAndVerify(ctx context.Context, o options, topic string, n int, opts ...kgo.Opt) ([]*kgo.Record, error) {
	sent := testRecords(topic, n)
	if err := createAndProduce(ctx, o, topic, sent, opts...); err != nil {
		return nil, err
	}
	got, err := readAll(ctx, o, topic, n)
	if err != nil {
		return nil, err
	}
	return sent, sameRecords(sent, got, 0)
}
