package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// topicWith100 creates a 1-partition topic holding 100 test records.
func topicWith100(ctx context.Context, o options, topic string) ([]*kgo.Record, error) {
	sent := testRecords(topic, 100)
	return sent, createAndProduce(ctx, o, topic, sent)
}

// groupConsumer subscribes to topic in group; commits are explicit, so the
// scenario controls exactly which offset is committed.
func groupConsumer(o options, group, topic string, opts ...kgo.Opt) (*kgo.Client, error) {
	return newClient(o, append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit()}, opts...)...)
}

// consumeAndCommit reads at least n records in the group and commits offset n.
func consumeAndCommit(ctx context.Context, cl *kgo.Client, n int) error {
	got, err := consume(ctx, cl, n)
	if err != nil {
		return err
	}
	if got[n-1].Offset != int64(n-1) {
		return fmt.Errorf("record %d read in the group has offset %d", n-1, got[n-1].Offset)
	}
	if err := cl.CommitRecords(ctx, got[n-1]); err != nil {
		return fmt.Errorf("commit offset %d: %w", n, err)
	}
	return nil
}

func groupResume(ctx context.Context, o options) (string, error) {
	topic, group := o.prefix+"resume", o.prefix+"resume-group"
	sent, err := topicWith100(ctx, o, topic)
	if err != nil {
		return "", err
	}
	first, err := groupConsumer(o, group, topic)
	if err != nil {
		return "", err
	}
	err = consumeAndCommit(ctx, first, 50)
	// Close leaves the group, so the second member need not wait out a session.
	first.Close()
	if err != nil {
		return "", fmt.Errorf("first consumer: %w", err)
	}
	second, err := groupConsumer(o, group, topic)
	if err != nil {
		return "", err
	}
	defer second.Close()
	got, err := consume(ctx, second, 50)
	if err != nil {
		return "", fmt.Errorf("second consumer: %w", err)
	}
	if err := sameRecords(sent[50:], got, 50); err != nil {
		return "", fmt.Errorf("second consumer: %w", err)
	}
	return "", nil
}

func twoGroups(ctx context.Context, o options) (string, error) {
	topic := o.prefix + "twogroups"
	sent, err := topicWith100(ctx, o, topic)
	if err != nil {
		return "", err
	}
	errs := make(chan error, 2)
	for _, g := range []string{"a", "b"} {
		group := o.prefix + "twogroups-" + g
		go func() {
			cl, err := groupConsumer(o, group, topic)
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			got, err := consume(ctx, cl, 100)
			if err == nil {
				err = sameRecords(sent, got, 0)
			}
			if err != nil {
				err = fmt.Errorf("group %s: %w", group, err)
			}
			errs <- err
		}()
	}
	return "", errors.Join(<-errs, <-errs)
}

func groupsDescribeLag(ctx context.Context, o options) (string, error) {
	topic, group := o.prefix+"lag", o.prefix+"lag-group"
	if _, err := topicWith100(ctx, o, topic); err != nil {
		return "", err
	}
	member, err := groupConsumer(o, group, topic)
	if err != nil {
		return "", err
	}
	defer member.Close()
	if err := consumeAndCommit(ctx, member, 60); err != nil {
		return "", err
	}
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()

	lg, err := adm.ListGroups(ctx)
	if err != nil {
		return "", fmt.Errorf("list groups: %w", err)
	}
	if _, ok := lg[group]; !ok {
		return "", fmt.Errorf("list groups does not show %s (listed %v)", group, lg.Groups())
	}
	dg, err := adm.DescribeGroups(ctx, group)
	if err == nil {
		err = dg.Error()
	}
	if err != nil {
		return "", fmt.Errorf("describe group: %w", err)
	}
	d := dg[group]
	if d.State != "Stable" || len(d.Members) != 1 {
		return "", fmt.Errorf("describe group: state %q with %d members, want Stable with 1 (the live consumer)", d.State, len(d.Members))
	}
	if assigned := d.AssignedPartitions(); len(assigned[topic]) != 1 {
		return "", fmt.Errorf("describe group: member assignment %v, want %s partition 0", assigned, topic)
	}
	lags, err := adm.Lag(ctx, group)
	if err == nil {
		err = lags.Error()
	}
	if err != nil {
		return "", fmt.Errorf("lag: %w", err)
	}
	l, ok := lags[group].Lag.Lookup(topic, 0)
	if !ok || l.Err != nil || l.Commit.At != 60 || l.End.Offset != 100 || l.Lag != 40 {
		return "", fmt.Errorf("lag of %s/0: committed %d, end %d, lag %d, err %v (present %v); want 60, 100, 40",
			topic, l.Commit.At, l.End.Offset, l.Lag, l.Err, ok)
	}
	return "", nil
}

func emptyTopic(ctx context.Context, o options) (string, error) {
	topic := o.prefix + "empty"
	if err := createAndProduce(ctx, o, topic, nil); err != nil {
		return "", err
	}
	fromStart, err := newClient(o, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return "", err
	}
	defer fromStart.Close()
	fromEnd, err := newClient(o, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		return "", err
	}
	defer fromEnd.Close()
	for name, cl := range map[string]*kgo.Client{"from the beginning": fromStart, "from the end": fromEnd} {
		if err := expectNothing(ctx, cl, 1500*time.Millisecond); err != nil {
			return "", fmt.Errorf("consumer %s on the empty topic: %w", name, err)
		}
	}
	sent := testRecords(topic, 1)
	if err := produceTo(ctx, o, sent); err != nil {
		return "", err
	}
	for name, cl := range map[string]*kgo.Client{"from the beginning": fromStart, "from the end": fromEnd} {
		got, err := consume(ctx, cl, 1)
		if err == nil {
			err = sameRecords(sent, got, 0)
		}
		if err != nil {
			return "", fmt.Errorf("consumer %s after one record was produced: %w", name, err)
		}
	}
	return "", nil
}

// expectNothing polls for d and fails on any record or fetch error.
func expectNothing(ctx context.Context, cl *kgo.Client, d time.Duration) error {
	pollCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for pollCtx.Err() == nil {
		fs := cl.PollFetches(pollCtx)
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				return fmt.Errorf("fetch error %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		if n := fs.NumRecords(); n > 0 {
			return fmt.Errorf("got %d records, want none", n)
		}
	}
	return ctx.Err()
}

func regexSubscribe(ctx context.Context, o options) (string, error) {
	pattern := "^" + regexp.QuoteMeta(o.prefix) + "regex-.*"
	topic := o.prefix + "regex-late"
	// The one allowed non-default: a 2 s metadata refresh; franz-go refuses a
	// max age below its min age (default 5 s), so both are set.
	cons, err := newClient(o, kgo.ConsumerGroup(o.prefix+"regex-group"), kgo.ConsumeRegex(), kgo.ConsumeTopics(pattern),
		kgo.MetadataMaxAge(2*time.Second), kgo.MetadataMinAge(2*time.Second))
	if err != nil {
		return "", err
	}
	defer cons.Close()
	// Start the subscription (join + first metadata) before the topic exists.
	if err := expectNothing(ctx, cons, time.Second); err != nil {
		return "", fmt.Errorf("regex consumer before the topic exists: %w", err)
	}
	sent := testRecords(topic, 1)
	if err := createAndProduce(ctx, o, topic, sent); err != nil {
		return "", err
	}
	start := time.Now()
	got, err := consume(ctx, cons, 1)
	if err == nil {
		err = sameRecords(sent, got, 0)
	}
	if err != nil {
		return "", fmt.Errorf("regex consumer: %w", err)
	}
	return fmt.Sprintf("record arrived %v after it was produced", time.Since(start).Round(time.Millisecond)), nil
}
