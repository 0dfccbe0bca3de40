package soakcheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/store"
)

// ReadRecord parses a trainer's durable record of the versions it closed:
// one line per version, "<path> <md5> <size>" (the stand-in's --record). A
// last line cut short by a kill is ignored; any other bad line is an error.
func ReadRecord(r io.Reader) ([]Version, error) {
	var out []Version
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pending error
	for n := 1; sc.Scan(); n++ {
		if pending != nil {
			return nil, pending
		}
		f := strings.Fields(sc.Text())
		size, err := strconv.ParseInt(lastOf(f), 10, 64)
		if len(f) != 3 || len(f[1]) != 32 || err != nil {
			// Only the last line may be torn.
			pending = fmt.Errorf("record line %d %q: want <path> <md5> <size>", n, sc.Text())
			continue
		}
		out = append(out, Version{Path: f[0], MD5: f[1], Size: size})
	}
	return out, sc.Err()
}

func lastOf(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// ParseAccessLog reads the artifact-access lines of a control-plane log
// (controller-runtime's zap JSON, one object per line); other lines are
// skipped.
func ParseAccessLog(r io.Reader) ([]store.AccessRecord, error) {
	var out []store.AccessRecord
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var l struct {
			Logger    string `json:"logger"`
			Msg       string `json:"msg"`
			RequestID string `json:"requestID"`
			Op        string `json:"op"`
			Method    string `json:"method"`
			Key       string `json:"key"`
			Binding   string `json:"binding"`
			JobID     string `json:"jobID"`
			Rank      int    `json:"rank"`
			Pod       string `json:"pod"`
			Status    int    `json:"status"`
			Outcome   string `json:"outcome"`
			BodyBytes int64  `json:"bodyBytes"`
			Duration  string `json:"duration"`
		}
		if err := json.Unmarshal(line, &l); err != nil || l.Msg != "artifact access" || !strings.HasSuffix(l.Logger, "artifact-access") {
			continue
		}
		a := store.AccessRecord{RequestID: l.RequestID, Op: l.Op, Method: l.Method, Key: l.Key, Binding: l.Binding, JobID: l.JobID,
			Rank: l.Rank, Pod: l.Pod, Status: l.Status, BodyBytes: l.BodyBytes}
		if l.Outcome != "ok" {
			a.Code = l.Outcome
		}
		a.Duration, _ = time.ParseDuration(l.Duration)
		out = append(out, a)
	}
	return out, sc.Err()
}
