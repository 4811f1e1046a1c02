package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// group_kip848 and group_migration use a topic of spreadPartitions partitions,
// each record's value "<topic>-<partition>-<i>".
const (
	spreadPartitions = 3
	shareRecords     = 100
	followerRecords  = 100
)

func produceSpread(ctx context.Context, o options, topic string, perPartition int) error {
	var recs []*kgo.Record
	for i := 0; i < perPartition; i++ {
		for p := int32(0); p < spreadPartitions; p++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("%s-%d-%d", topic, p, i))})
		}
	}
	return produceTo(ctx, o, recs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// member is a group member with explicit commits; KIP-848 (ServerSideBalancer)
// needs the range or sticky balancer, not the default cooperative-sticky one.
// It keeps the partitions it owns, for the assignment checks.
type member struct {
	cl    *kgo.Client
	mu    sync.Mutex
	owned map[int32]bool
}

func newMember(o options, group, topic string, kip848 bool) (*member, error) {
	m := &member{owned: map[int32]bool{}}
	track := func(add bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range ps[topic] {
				if add {
					m.owned[p] = true
				} else {
					delete(m.owned, p)
				}
			}
		}
	}
	opts := []kgo.Opt{kgo.OnPartitionsAssigned(track(true)), kgo.OnPartitionsRevoked(track(false)), kgo.OnPartitionsLost(track(false))}
	if kip848 {
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
	}
	cl, err := groupConsumer(o, group, topic, opts...)
	m.cl = cl
	return m, err
}

func (m *member) owns() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owned)
}

// reads is what members read: each partition's offsets in order, and each member's count.
type reads struct {
	offsets   map[int32][]int64
	perMember []int
	total     int
}

// drain polls every member in turn, each committing what it read after each
// poll, until count records arrived, then once more to see nothing else comes.
func drain(ctx context.Context, members []*member, count int) (*reads, error) {
	r := &reads{offsets: map[int32][]int64{}, perMember: make([]int, len(members))}
	for last := false; ; {
		for i, m := range members {
			wait := 100 * time.Millisecond
			if last {
				wait = 500 * time.Millisecond
			}
			pctx, cancel := context.WithTimeout(ctx, wait)
			fs := m.cl.PollFetches(pctx)
			cancel()
			for _, fe := range fs.Errors() {
				if pctx.Err() == nil {
					return r, fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
				}
			}
			for _, rec := range fs.Records() {
				if slices.Contains(r.offsets[rec.Partition], rec.Offset) {
					return r, fmt.Errorf("partition %d offset %d was read twice", rec.Partition, rec.Offset)
				}
				r.offsets[rec.Partition] = append(r.offsets[rec.Partition], rec.Offset)
				r.perMember[i]++
				r.total++
			}
			if len(fs.Records()) > 0 {
				if err := m.cl.CommitUncommittedOffsets(ctx); err != nil {
					return r, fmt.Errorf("commit: %w", err)
				}
			}
		}
		if last {
			return r, nil
		}
		last = r.total >= count
		if !last && ctx.Err() != nil {
			return r, fmt.Errorf("read %d of %d records before the deadline", r.total, count)
		}
	}
}

// expect fails unless each partition's offsets are exactly from..to-1, in order.
func (r *reads) expect(from, to int64) error {
	for p := int32(0); p < spreadPartitions; p++ {
		var want []int64
		for o := from; o < to; o++ {
			want = append(want, o)
		}
		if !slices.Equal(r.offsets[p], want) {
			return fmt.Errorf("partition %d read offsets %v, expected %d..%d", p, r.offsets[p], from, to-1)
		}
	}
	return nil
}

func expectCommitted(ctx context.Context, adm *kadm.Client, group, topic string, at int64) error {
	resp, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("fetch offsets of %s: %w", group, err)
	}
	for p := int32(0); p < spreadPartitions; p++ {
		if o, ok := resp.Lookup(topic, p); !ok || o.At != at {
			return fmt.Errorf("committed offset of partition %d is %v, expected %d", p, o.At, at)
		}
	}
	return nil
}

// groupType is the group's type as ListGroups (v5) gives it: classic or consumer.
func groupType(ctx context.Context, adm *kadm.Client, group string) (string, error) {
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return "", err
	}
	return listed[group].GroupType, nil
}

// phase runs one member of the group (kip848 or classic) until it read the
// 10 records of each partition after offset from, and checks the group type.
func phase(ctx context.Context, o options, adm *kadm.Client, group, topic string, kip848 bool, from int64) (string, error) {
	m, err := newMember(o, group, topic, kip848)
	if err != nil {
		return "", err
	}
	defer m.cl.Close()
	r, err := drain(ctx, []*member{m}, 10*spreadPartitions)
	if err == nil {
		err = r.expect(from, from+10)
	}
	if err != nil {
		return "", err
	}
	return groupType(ctx, adm, group)
}

// spreadTopic creates a topic of spreadPartitions partitions, named as its
// group is; the admin client it returns is the caller's to close.
func spreadTopic(ctx context.Context, o options, topic string) (*kadm.Client, error) {
	adm, err := newAdmin(o)
	if err != nil {
		return nil, err
	}
	if err := createTopic(ctx, adm, o, topic, spreadPartitions); err != nil {
		adm.Close()
		return nil, err
	}
	return adm, nil
}

func groupKIP848(ctx context.Context, o options) (string, error) {
	topic, group := o.prefix+"kip848", o.prefix+"kip848"
	adm, err := spreadTopic(ctx, o, topic)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	var members []*member
	defer func() {
		for _, m := range members {
			m.cl.Close()
		}
	}()
	for range 2 {
		m, err := newMember(o, group, topic, true)
		if err != nil {
			return "", err
		}
		members = append(members, m)
	}
	// The topic is empty: polls only wait for the coordinator's split.
	for members[0].owns() == 0 || members[1].owns() == 0 || members[0].owns()+members[1].owns() != spreadPartitions {
		if _, err := drain(ctx, members, 0); err != nil || ctx.Err() != nil {
			return "", fmt.Errorf("the coordinator never split the 3 partitions between the two members (%d+%d): %v", members[0].owns(), members[1].owns(), err)
		}
	}
	split := fmt.Sprintf("%d+%d", members[0].owns(), members[1].owns())
	if err := produceSpread(ctx, o, topic, 20); err != nil {
		return "", err
	}
	r, err := drain(ctx, members, 20*spreadPartitions)
	if err == nil {
		err = r.expect(0, 20)
	}
	if err != nil {
		return "", err
	}
	if r.perMember[0] == 0 || r.perMember[1] == 0 {
		return "", fmt.Errorf("one member read everything: %v", r.perMember)
	}
	for _, m := range members {
		m.cl.Close() // leaves the group
	}
	members = nil
	if err := expectCommitted(ctx, adm, group, topic, 20); err != nil {
		return "", err
	}
	if err := produceSpread(ctx, o, topic, 10); err != nil {
		return "", err
	}
	kind, err := phase(ctx, o, adm, group, topic, true, 20)
	if err != nil {
		return "", fmt.Errorf("the member after both closed: %w", err)
	}
	if kind != "consumer" {
		return "", fmt.Errorf("listed as a %q group, expected consumer", kind)
	}
	if err := expectCommitted(ctx, adm, group, topic, 30); err != nil {
		return "", err
	}
	return fmt.Sprintf("two members: %s partitions, records read %v", split, r.perMember), nil
}

func groupMigration(ctx context.Context, o options) (string, error) {
	topic, group := o.prefix+"migration", o.prefix+"migration"
	adm, err := spreadTopic(ctx, o, topic)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	var kinds []string
	for n, kip848 := range []bool{false, true, false} {
		if err := produceSpread(ctx, o, topic, 10); err != nil {
			return "", err
		}
		kind, err := phase(ctx, o, adm, group, topic, kip848, int64(10*n))
		if err != nil {
			return "", fmt.Errorf("member %d (KIP-848 %v): %w", n+1, kip848, err)
		}
		want := map[bool]string{false: "classic", true: "consumer"}[kip848]
		if kind != want {
			return "", fmt.Errorf("with a %s member the group is listed as %q", want, kind)
		}
		kinds = append(kinds, kind)
		if err := expectCommitted(ctx, adm, group, topic, int64(10*n+10)); err != nil {
			return "", err
		}
	}
	return "group type " + strings.Join(kinds, " -> "), nil
}

func shareGroup(ctx context.Context, o options) (string, error) {
	topic, group := o.prefix+"share", o.prefix+"share"
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	if err := createTopic(ctx, adm, o, topic, 1); err != nil {
		return "", err
	}
	if err := shareFromEarliest(ctx, o, group); err != nil {
		return "", err
	}
	if err := produceTo(ctx, o, testRecords(topic, shareRecords)); err != nil {
		return "", err
	}
	var members []*kgo.Client
	defer func() {
		for _, cl := range members {
			cl.Close()
		}
	}()
	for range 2 {
		cl, err := newClient(o, kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
		if err != nil {
			return "", err
		}
		members = append(members, cl)
	}
	by := map[int64]int{}
	per := make([]int, 2)
	for len(by) < shareRecords {
		if ctx.Err() != nil {
			return "", fmt.Errorf("received %d of %d records before the deadline", len(by), shareRecords)
		}
		for i, cl := range members {
			pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			fs := cl.PollFetches(pctx)
			cancel()
			for _, fe := range fs.Errors() {
				if pctx.Err() == nil {
					return "", fmt.Errorf("share fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
				}
			}
			for _, rec := range fs.Records() {
				if prev, seen := by[rec.Offset]; seen {
					return "", fmt.Errorf("offset %d delivered twice (members %d and %d)", rec.Offset, prev, i)
				}
				by[rec.Offset] = i
				per[i]++
			}
			if len(fs.Records()) > 0 {
				cl.MarkAcks(kgo.AckAccept)
				if err := cl.FlushAcks(ctx); err != nil {
					return "", fmt.Errorf("acknowledge: %w", err)
				}
			}
		}
	}
	for off := int64(0); off < shareRecords; off++ {
		if _, ok := by[off]; !ok {
			return "", fmt.Errorf("offset %d never received", off)
		}
	}
	return fmt.Sprintf("records received per member: %d + %d", per[0], per[1]), nil
}

// shareFromEarliest sets the group config share.auto.offset.reset=earliest
// (IncrementalAlterConfigs on a GROUP resource: kadm has no call for it) and
// waits until DescribeConfigs reads it back.
func shareFromEarliest(ctx context.Context, o options, group string) error {
	cl, err := newClient(o)
	if err != nil {
		return err
	}
	defer cl.Close()
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, cfg)
	alter.Resources = append(alter.Resources, res)
	resp, err := alter.RequestWith(ctx, cl)
	if err == nil && len(resp.Resources) == 1 {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("alter the group's share.auto.offset.reset: %w", err)
	}
	// Brokers apply a config change asynchronously (Kafka too): poll for the new value.
	for {
		describe := kmsg.NewPtrDescribeConfigsRequest()
		dr := kmsg.NewDescribeConfigsRequestResource()
		dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
		describe.Resources = append(describe.Resources, dr)
		if resp, err := describe.RequestWith(ctx, cl); err == nil && len(resp.Resources) == 1 {
			for _, c := range resp.Resources[0].Configs {
				if c.Name == "share.auto.offset.reset" && c.Value != nil && *c.Value == "earliest" {
					return nil
				}
			}
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("the group's share.auto.offset.reset never read back as earliest")
		}
	}
}

// sentByNode is the records of topic each node sent to consumers (its /metrics).
func sentByNode(ctx context.Context, urls map[string]string, topic string) (map[int32]int64, error) {
	out := map[int32]int64{}
	for node, url := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		id, _ := strconv.Atoi(node)
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "kafka_server_brokertopicmetrics_messagesout") && strings.Contains(line, `topic="`+topic+`"`) {
				v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
				out[int32(id)] += int64(v)
			}
		}
	}
	return out, nil
}

func fetchFromFollower(ctx context.Context, o options) (string, error) {
	if o.brokers < 2 {
		return "", errNA{"one node has no followers"}
	}
	entry := o.security.Scenarios["fetch_from_follower"]
	if len(entry.Racks) == 0 || len(entry.Metrics) == 0 {
		return "", fmt.Errorf("the --security file has no racks for fetch_from_follower")
	}
	topic := o.prefix + "follower"
	if err := createAndProduce(ctx, o, topic, testRecords(topic, followerRecords)); err != nil {
		return "", err
	}
	adm, err := newAdmin(o)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return "", err
	}
	p := md.Topics[topic].Partitions[0]
	follower := int32(-1)
	for _, r := range p.Replicas {
		if r != p.Leader {
			follower = r
			break
		}
	}
	rack := entry.Racks[strconv.Itoa(int(follower))]
	cl, err := newClient(o, kgo.Rack(rack), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	got, err := consume(ctx, cl, followerRecords)
	if err != nil {
		return "", err
	}
	for i, r := range got[:followerRecords] {
		if r.Offset != int64(i) {
			return "", fmt.Errorf("record %d read has offset %d", i, r.Offset)
		}
	}
	sent, err := sentByNode(ctx, entry.Metrics, topic)
	if err != nil {
		return "", fmt.Errorf("read /metrics: %w", err)
	}
	if sent[follower] < followerRecords || sent[p.Leader] != 0 {
		return "", fmt.Errorf("records sent to consumers by node %v: expected all %d from follower %d (%s) and none from leader %d",
			sent, followerRecords, follower, rack, p.Leader)
	}
	return fmt.Sprintf("client.rack=%s: follower %d sent the records, leader %d none", rack, follower, p.Leader), nil
}
