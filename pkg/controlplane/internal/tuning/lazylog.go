package tuning

import "github.com/go-logr/logr"

// LazyValues returns l with values kept until a line is written: zap's
// WithValues encodes them at once, and controller-runtime adds five per
// reconcile (controller, kind, namespace, name, reconcileID) to a logger
// that writes nothing for almost every reconcile (test/performance/controller:
// 5 % of the control plane's CPU in a burst of bindings). A line carries them
// as before, ahead of its own.
func LazyValues(l logr.Logger) logr.Logger {
	s := l.GetSink()
	if s == nil {
		return l
	}
	if _, ok := s.(*lazySink); ok {
		return l
	}
	return logr.New(&lazySink{sink: s})
}

// lazySink keeps WithValues' values (values) and passes them with each line
// to sink, which has all but those.
type lazySink struct {
	sink   logr.LogSink
	values []any
}

var (
	_ logr.LogSink          = (*lazySink)(nil)
	_ logr.CallDepthLogSink = (*lazySink)(nil)
)

// Init tells sink of this sink's own frame.
func (s *lazySink) Init(info logr.RuntimeInfo) {
	info.CallDepth++
	s.sink.Init(info)
}

func (s *lazySink) Enabled(level int) bool { return s.sink.Enabled(level) }

func (s *lazySink) Info(level int, msg string, keysAndValues ...any) {
	s.sink.Info(level, msg, s.with(keysAndValues)...)
}

func (s *lazySink) Error(err error, msg string, keysAndValues ...any) {
	s.sink.Error(err, msg, s.with(keysAndValues)...)
}

// with is the line's values after the kept ones.
func (s *lazySink) with(keysAndValues []any) []any {
	if len(s.values) == 0 {
		return keysAndValues
	}
	return append(s.values[:len(s.values):len(s.values)], keysAndValues...)
}

func (s *lazySink) WithValues(keysAndValues ...any) logr.LogSink {
	return &lazySink{sink: s.sink, values: append(s.values[:len(s.values):len(s.values)], keysAndValues...)}
}

func (s *lazySink) WithName(name string) logr.LogSink {
	return &lazySink{sink: s.sink.WithName(name), values: s.values}
}

func (s *lazySink) WithCallDepth(depth int) logr.LogSink {
	if d, ok := s.sink.(logr.CallDepthLogSink); ok {
		return &lazySink{sink: d.WithCallDepth(depth), values: s.values}
	}
	return s
}
