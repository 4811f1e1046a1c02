package main

// The transaction rows (compat/README.md): a transactional kgo client, read_committed
// consumers, and GroupTransactSession for consume-transform-produce.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	txCommitted1, txAborted, txCommitted2 = 10, 10, 5
	ctpInputs, ctpTxSize, ctpAborted      = 20, 10, 5
)

func txValues(topic, tag string, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("%s-%d", tag, i))}
	}
	return recs
}

func valuesOf(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

func sameValues(what string, want, got []*kgo.Record) error {
	w, g := valuesOf(want), valuesOf(got)
	if fmt.Sprint(w) != fmt.Sprint(g) {
		return fmt.Errorf("%s: read %v, expected %v", what, g, w)
	}
	return nil
}

// inTransaction produces recs (each acknowledged) in one transaction of cl and commits or aborts it.
func inTransaction(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, commit bool) error {
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := produce(ctx, cl, recs); err != nil {
		return err
	}
	return endTransaction(ctx, cl, commit)
}

func endTransaction(ctx context.Context, cl *kgo.Client, commit bool) error {
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		return fmt.Errorf("end transaction (commit %v): %w", commit, err)
	}
	return nil
}

// readIsolated reads n records of a 1-partition topic from the beginning at
// `level`, then fails if a further record arrives within a second.
func readIsolated(ctx context.Context, o options, topic string, level kgo.IsolationLevel, n int) ([]*kgo.Record, error) {
	cl, err := newClient(o, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(level))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	got, err := consume(ctx, cl, n)
	if err != nil {
		return got, err
	}
	if extra := pollFor(ctx, cl, time.Second); len(extra) > 0 {
		return got, fmt.Errorf("%d records more than the %d expected, first %q", len(extra), n, extra[0].Value)
	}
	return got[:n], nil
}

// pollFor returns what cl receives within d (a bounded look, to assert an absence).
func pollFor(ctx context.Context, cl *kgo.Client, d time.Duration) []*kgo.Record {
	look, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var got []*kgo.Record
	for look.Err() == nil {
		got = append(got, cl.PollFetches(look).Records()...)
	}
	return got
}

func txClient(o options, o2 string, opts ...kgo.Opt) (*kgo.Client, error) {
	return newClient(o, append([]kgo.Opt{kgo.TransactionalID(o.prefix + o2)}, opts...)...)
}

func transactionsCommitAbort(ctx context.Context, o options) (string, error) {
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	topic := o.prefix + "tx-commit-abort"
	if err := createTopic(ctx, adm, o, topic, 1); err != nil {
		return "", err
	}
	cl, err := txClient(o, "tx-commit-abort")
	if err != nil {
		return "", err
	}
	defer cl.Close()
	first, aborted, second := txValues(topic, "c1", txCommitted1), txValues(topic, "a", txAborted), txValues(topic, "c2", txCommitted2)
	for _, tx := range []struct {
		recs   []*kgo.Record
		commit bool
	}{{first, true}, {aborted, false}, {second, true}} {
		if err := inTransaction(ctx, cl, tx.recs, tx.commit); err != nil {
			return "", err
		}
	}
	committed := append(append([]*kgo.Record{}, first...), second...)
	got, err := readIsolated(ctx, o, topic, kgo.ReadCommitted(), len(committed))
	if err == nil {
		err = sameValues("read_committed", committed, got)
	}
	if err != nil {
		return "", err
	}
	all := append(append(append([]*kgo.Record{}, first...), aborted...), second...)
	got, err = readIsolated(ctx, o, topic, kgo.ReadUncommitted(), len(all))
	if err == nil {
		err = sameValues("read_uncommitted", all, got)
	}
	return "", err
}

func readCommitted(ctx context.Context, o options) (string, error) {
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	topic := o.prefix + "read-committed"
	if err := createTopic(ctx, adm, o, topic, 1); err != nil {
		return "", err
	}
	cl, err := txClient(o, "read-committed")
	if err != nil {
		return "", err
	}
	defer cl.Close()
	before, open := txValues(topic, "before", 5), txValues(topic, "open", 5)
	if err := inTransaction(ctx, cl, before, true); err != nil {
		return "", err
	}
	if err := cl.BeginTransaction(); err != nil {
		return "", err
	}
	if err := produce(ctx, cl, open); err != nil {
		return "", err
	}
	lso, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("list read_committed end offsets: %w", err)
	}
	if l, _ := lso.Lookup(topic, 0); l.Err != nil || l.Offset != int64(len(before)+1) {
		return "", fmt.Errorf("read_committed end offset %d (error %v) with a transaction open, expected %d (the last stable offset)",
			l.Offset, l.Err, len(before)+1)
	}
	reader, err := newClient(o, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return "", err
	}
	defer reader.Close()
	got, err := consume(ctx, reader, len(before))
	if err == nil {
		err = sameValues("before the open transaction", before, got)
	}
	if err != nil {
		return "", err
	}
	if early := pollFor(ctx, reader, 3*time.Second); len(early) > 0 {
		return "", fmt.Errorf("delivered %d records of the open transaction, first %q", len(early), early[0].Value)
	}
	if err := endTransaction(ctx, cl, true); err != nil {
		return "", err
	}
	got, err = consume(ctx, reader, len(open))
	if err == nil {
		err = sameValues("after the commit", open, got)
	}
	return "", err
}

// consumeTransformProduce: a GroupTransactSession reads the input in a group and
// writes "out-<value>" for each record, its offsets committed in the same
// transaction; a last round is aborted and must change neither.
func consumeTransformProduce(ctx context.Context, o options) (string, error) {
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	source, sink, group := o.prefix+"ctp-in", o.prefix+"ctp-out", o.prefix+"ctp"
	for _, t := range []string{source, sink} {
		if err := createTopic(ctx, adm, o, t, 1); err != nil {
			return "", err
		}
	}
	inputs := txValues(source, "in", ctpInputs+ctpAborted)
	if err := produceTo(ctx, o, inputs[:ctpInputs]); err != nil {
		return "", err
	}
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(o.bootstrap...), kgo.ClientID("compat-franz-go"),
		kgo.TransactionalID(o.prefix+"ctp"), kgo.ConsumerGroup(group), kgo.ConsumeTopics(source),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets())
	if err != nil {
		return "", err
	}
	defer sess.Close()
	// The group's committed offset once no transactional commit is pending
	// (OffsetFetch with require_stable: the broker answers UNSTABLE_OFFSET_COMMIT
	// until the transaction's markers are written).
	committedOffset := func() (int64, error) {
		for {
			offs, err := adm.FetchOffsets(kadm.RequireStable(ctx), group)
			if err != nil {
				return 0, err
			}
			r, ok := offs.Lookup(source, 0)
			if !ok {
				return -1, nil
			}
			if !errors.Is(r.Err, kerr.UnstableOffsetCommit) {
				return r.At, r.Err
			}
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return r.At, fmt.Errorf("the offset commit stayed unstable: %w", err)
			}
		}
	}
	round := func(n int, commit bool) error {
		var got []*kgo.Record
		for len(got) < n {
			fs := sess.PollRecords(ctx, n-len(got))
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("consumed %d of %d: %w", len(got), n, err)
			}
			for _, fe := range fs.Errors() {
				return fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
			got = append(got, fs.Records()...)
		}
		if err := sess.Begin(); err != nil {
			return err
		}
		out := make([]*kgo.Record, len(got))
		for i, r := range got {
			out[i] = &kgo.Record{Topic: sink, Value: append([]byte("out-"), r.Value...)}
		}
		if err := sess.ProduceSync(ctx, out...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		committed, err := sess.End(ctx, kgo.TransactionEndTry(commit))
		if err != nil {
			return fmt.Errorf("end (commit %v): %w", commit, err)
		}
		if committed != commit {
			return fmt.Errorf("the session's transaction committed=%v, asked commit=%v", committed, commit)
		}
		return nil
	}
	for i := 0; i < ctpInputs/ctpTxSize; i++ {
		if err := round(ctpTxSize, true); err != nil {
			return "", err
		}
	}
	if at, err := committedOffset(); err != nil || at != ctpInputs {
		return "", fmt.Errorf("committed offset %d (error %v), expected %d", at, err, ctpInputs)
	}
	if err := produceTo(ctx, o, inputs[ctpInputs:]); err != nil {
		return "", err
	}
	if err := round(ctpAborted, false); err != nil {
		return "", err
	}
	if at, err := committedOffset(); err != nil || at != ctpInputs {
		return "", fmt.Errorf("committed offset %d (error %v) after an aborted transaction, expected %d", at, err, ctpInputs)
	}
	want := make([]*kgo.Record, ctpInputs)
	for i, r := range inputs[:ctpInputs] {
		want[i] = &kgo.Record{Value: append([]byte("out-"), r.Value...)}
	}
	got, err := readIsolated(ctx, o, sink, kgo.ReadCommitted(), ctpInputs)
	if err == nil {
		err = sameValues("the output, read_committed", want, got)
	}
	return "", err
}
