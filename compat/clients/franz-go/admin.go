package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func metadata(ctx context.Context, o options) (string, error) {
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	topic := o.prefix + "metadata"
	if err := createTopic(ctx, adm, o, topic, 1); err != nil {
		return "", err
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	var listed []string
	for _, b := range md.Brokers {
		listed = append(listed, fmt.Sprintf("%s:%d", b.Host, b.Port))
	}
	sort.Strings(listed)
	want := append([]string(nil), o.bootstrap...)
	sort.Strings(want)
	if strings.Join(listed, ",") != strings.Join(want, ",") {
		return "", fmt.Errorf("metadata lists brokers %v, want %v", listed, want)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil || len(td.Partitions) != 1 {
		return "", fmt.Errorf("topic %s in metadata: present=%v err=%v partitions=%d, want 1 partition", topic, ok, td.Err, len(td.Partitions))
	}
	return "", nil
}

func adminTopics(ctx context.Context, o options) (string, error) {
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	topic := o.prefix + "admin"
	if err := createTopic(ctx, adm, o, topic, 3); err != nil {
		return "", err
	}
	if err := expectPartitions(ctx, adm, topic, 3); err != nil {
		return "", err
	}

	alter := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("3600000")}}
	ar, err := adm.AlterTopicConfigs(ctx, alter, topic)
	if err == nil && len(ar) != 1 {
		err = fmt.Errorf("%d results for one topic", len(ar))
	}
	if err == nil {
		err = ar[0].Err
	}
	if err != nil {
		return "", fmt.Errorf("incremental alter configs retention.ms=3600000: %w", err)
	}
	if err := expectConfig(ctx, adm, topic, "retention.ms", "3600000"); err != nil {
		return "", err
	}

	cr, err := adm.UpdatePartitions(ctx, 5, topic)
	if err == nil {
		err = cr.Error()
	}
	if err != nil {
		return "", fmt.Errorf("create partitions to 5: %w", err)
	}
	if err := expectPartitions(ctx, adm, topic, 5); err != nil {
		return "", err
	}

	dr, err := adm.DeleteTopics(ctx, topic)
	if err == nil {
		err = dr.Error()
	}
	if err != nil {
		return "", fmt.Errorf("delete topic: %w", err)
	}
	return "", awaitGone(ctx, adm, topic)
}

// expectPartitions waits (briefly: metadata may lag a just-made change) until
// the topic shows n partitions, each with a leader.
func expectPartitions(ctx context.Context, adm *kadm.Client, topic string, n int) error {
	var last string
	for {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			last = err.Error()
		} else if td := md.Topics[topic]; len(td.Partitions) != n {
			last = fmt.Sprintf("%d partitions (err %v)", len(td.Partitions), td.Err)
		} else if l := leaderless(md, []string{topic}); l != "" {
			last = l
		} else {
			return nil
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			return fmt.Errorf("describe %s: want %d partitions with leaders, last saw %s", topic, n, last)
		}
	}
}

// expectConfig waits until DescribeConfigs shows key = want as a dynamic topic config: the
// controller commits an alteration before answering, but the broker asked may apply it a
// moment later (Kafka's too), as the other adapters wait.
func expectConfig(ctx context.Context, adm *kadm.Client, topic, key, want string) error {
	var last error
	for {
		last = configIs(ctx, adm, topic, key, want)
		if last == nil {
			return nil
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			return last
		}
	}
}

func configIs(ctx context.Context, adm *kadm.Client, topic, key, want string) error {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err == nil && len(rcs) != 1 {
		err = fmt.Errorf("%d results for one topic", len(rcs))
	}
	if err == nil {
		err = rcs[0].Err
	}
	if err != nil {
		return fmt.Errorf("describe configs: %w", err)
	}
	for _, c := range rcs[0].Configs {
		if c.Key != key {
			continue
		}
		if c.Value == nil || *c.Value != want {
			return fmt.Errorf("describe configs: %s = %v, want %s", key, c.MaybeValue(), want)
		}
		if c.Source != kmsg.ConfigSourceDynamicTopicConfig {
			return fmt.Errorf("describe configs: %s source %v, want DYNAMIC_TOPIC_CONFIG", key, c.Source)
		}
		return nil
	}
	return fmt.Errorf("describe configs: %s not among the %d configs returned", key, len(rcs[0].Configs))
}

// awaitGone waits until metadata answers UNKNOWN_TOPIC_OR_PARTITION for every topic.
func awaitGone(ctx context.Context, adm *kadm.Client, topics ...string) error {
	var last string
	for {
		md, err := adm.Metadata(ctx, topics...)
		last = fmt.Sprint(err)
		if err == nil {
			last = ""
			for _, t := range topics {
				if td, ok := md.Topics[t]; ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
					last = fmt.Sprintf("%s still listed (err %v)", t, td.Err)
					break
				}
			}
			if last == "" {
				return nil
			}
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			return fmt.Errorf("deleted topics still present: %s", last)
		}
	}
}

func manyTopics(ctx context.Context, o options) (string, error) {
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	topics := make([]string, 200)
	for i := range topics {
		topics[i] = fmt.Sprintf("%smany-%03d", o.prefix, i)
	}
	start := time.Now()
	const batch = 50
	for i := 0; i < len(topics); i += batch {
		rs, err := adm.CreateTopics(ctx, 1, int16(o.brokers), nil, topics[i:i+batch]...)
		if err == nil {
			err = rs.Error()
		}
		if err != nil {
			return "", fmt.Errorf("create topics %d..%d: %w", i, i+batch-1, err)
		}
	}
	created := time.Since(start)
	// Each try is one Metadata request naming all 200 topics.
	if err := awaitLeaders(ctx, adm, topics...); err != nil {
		return "", err
	}
	ready := time.Since(start)
	for i := 0; i < len(topics); i += batch {
		rs, err := adm.DeleteTopics(ctx, topics[i:i+batch]...)
		if err == nil {
			err = rs.Error()
		}
		if err != nil {
			return "", fmt.Errorf("delete topics %d..%d: %w", i, i+batch-1, err)
		}
	}
	if err := awaitGone(ctx, adm, topics...); err != nil {
		return "", err
	}
	return fmt.Sprintf("created in %v, all with leaders after %v", created.Round(time.Millisecond), ready.Round(time.Millisecond)), nil
}

func offsetsForTimes(ctx context.Context, o options) (string, error) {
	topic := o.prefix + "times"
	recs := testRecords(topic, 3)
	t0 := recs[0].Timestamp
	for i, r := range recs {
		r.Timestamp = t0.Add(time.Duration(i) * time.Second)
	}
	if err := createAndProduce(ctx, o, topic, recs); err != nil {
		return "", err
	}
	cl, err := newClient(o)
	if err != nil {
		return "", err
	}
	adm := kadm.NewClient(cl)
	defer adm.Close()
	ms := t0.UnixMilli()
	for _, c := range []struct{ at, want int64 }{{ms + 500, 1}, {ms + 2000, 2}} {
		lo, err := adm.ListOffsetsAfterMilli(ctx, c.at, topic)
		if err == nil {
			err = lo.Error()
		}
		if err != nil {
			return "", fmt.Errorf("offsets for time t0+%d: %w", c.at-ms, err)
		}
		if got, _ := lo.Lookup(topic, 0); got.Offset != c.want {
			return "", fmt.Errorf("offsets for time t0+%d: offset %d, want %d", c.at-ms, got.Offset, c.want)
		}
	}
	// kadm replaces Kafka's "none" (-1) with the end offset, so the past-the-end
	// case asks on the wire to see the broker's own answer.
	got, err := listOffsetRaw(ctx, cl, topic, ms+3000)
	if err != nil {
		return "", err
	}
	if got.Offset != -1 || got.Timestamp != -1 {
		return "", fmt.Errorf("offsets for time past the last record: offset %d timestamp %d, want -1/-1 (none)", got.Offset, got.Timestamp)
	}
	return "", nil
}

func listOffsetRaw(ctx context.Context, cl *kgo.Client, topic string, ts int64) (kmsg.ListOffsetsResponseTopicPartition, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = 0
	rp.Timestamp = ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// kgo routes a ListOffsets request to the partition's leader.
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return kmsg.ListOffsetsResponseTopicPartition{}, fmt.Errorf("list offsets at %d: %w", ts, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.ListOffsetsResponseTopicPartition{}, fmt.Errorf("list offsets at %d: response has %d topics, want 1 with 1 partition", ts, len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return p, fmt.Errorf("list offsets at %d: %w", ts, err)
	}
	return p, nil
}

func deleteRecords(ctx context.Context, o options) (string, error) {
	topic := o.prefix + "delrecords"
	sent, err := topicWith100(ctx, o, topic)
	if err != nil {
		return "", err
	}
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	var os kadm.Offsets
	os.AddOffset(topic, 0, 30, -1)
	dr, err := adm.DeleteRecords(ctx, os)
	if err == nil {
		err = dr.Error()
	}
	if err != nil {
		return "", fmt.Errorf("delete records before offset 30: %w", err)
	}
	if r, ok := dr.Lookup(topic, 0); !ok || r.LowWatermark != 30 {
		return "", fmt.Errorf("delete records: low watermark %d (present %v), want 30", r.LowWatermark, ok)
	}
	lo, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = lo.Error()
	}
	if err != nil {
		return "", fmt.Errorf("list earliest offset: %w", err)
	}
	if got, _ := lo.Lookup(topic, 0); got.Offset != 30 {
		return "", fmt.Errorf("earliest offset after delete records: %d, want 30", got.Offset)
	}
	got, err := readAll(ctx, o, topic, 70)
	if err != nil {
		return "", err
	}
	return "", sameRecords(sent[30:], got, 30)
}
