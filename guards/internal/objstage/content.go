package objstage

import (
	"bytes"
	"fmt"
	"io"
)

// WriteIDLen is the length of a write id (engine.NewWriteID's): hex
// digits.
const WriteIDLen = 32

// IsWriteID reports whether id is WriteIDLen lower-case hex digits.
func IsWriteID(id string) bool {
	if len(id) != WriteIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// CheckBody refuses, with an error matching invalid, a size below -1 (-1:
// unknown length) and a nil reader.
func CheckBody(r io.Reader, size int64, invalid error) error {
	if size < -1 {
		return fmt.Errorf("%w: size %d (want -1 for unknown, or at least 0)", invalid, size)
	}
	if r == nil {
		return fmt.Errorf("%w: nil reader", invalid)
	}
	return nil
}

// Mismatch builds a guard's error for content of declared size of which
// read bytes were seen when the mismatch showed: fewer when it ended
// early, size+1 when it went on.
type Mismatch func(size, read int64) error

// SizedReader passes on at most Size+1 bytes of R and fails with (and
// keeps) Mismatch's error when R ends before Size bytes or goes on past
// them. Size must be at least 0.
type SizedReader struct {
	R        io.Reader
	Size     int64
	Mismatch Mismatch

	n   int64
	err error // the mismatch seen, if any
}

// Read implements io.Reader.
func (s *SizedReader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if rem := s.Size - s.n + 1; rem >= 0 && int64(len(p)) > rem {
		p = p[:rem] // at most one byte past Size: enough to see more content
	}
	k, err := s.R.Read(p)
	s.n += int64(k)
	switch {
	case s.n > s.Size:
		s.err = s.Mismatch(s.Size, s.n)
		return 0, s.err
	case err == io.EOF && s.n < s.Size:
		s.err = s.Mismatch(s.Size, s.n)
		return k, s.err
	}
	return k, err
}

// Err returns the mismatch seen so far, or nil (also for a nil s).
func (s *SizedReader) Err() error {
	if s == nil {
		return nil
	}
	return s.err
}

// End reads one byte past Size, once Size bytes were read, to see that the
// content ends there, and returns the mismatch seen, if any (nil for a nil
// s). A read error there is returned as it is.
func (s *SizedReader) End() error {
	if s == nil {
		return nil
	}
	if s.err == nil && s.n == s.Size {
		var one [1]byte
		if _, err := io.ReadFull(s, one[:]); err != nil && err != io.EOF && s.err == nil {
			return err
		}
	}
	return s.err
}

// SeekLen measures the bytes an io.Seeker has left from its current
// offset, and seeks back there. measured is false for a reader that is not
// an io.Seeker or cannot seek (a pipe behind an *os.File); err is set only
// when the reader could not be put back where it was.
func SeekLen(r io.Reader) (n int64, measured bool, err error) {
	sk, ok := r.(io.Seeker)
	if !ok {
		return 0, false, nil
	}
	cur, cerr := sk.Seek(0, io.SeekCurrent)
	if cerr != nil {
		return 0, false, nil //nolint:nilerr // a reader that cannot seek is counted instead
	}
	end, eerr := sk.Seek(0, io.SeekEnd)
	// Put it back even when SeekEnd failed: it may have moved.
	if _, err := sk.Seek(cur, io.SeekStart); err != nil {
		return 0, false, fmt.Errorf("seek content back to %d: %w", cur, err)
	}
	return end - cur, eerr == nil, nil
}

// ReadSized reads r to its end into memory. With size ≥ 0 it reads at most
// size+1 bytes and returns mismatch's error unless exactly size came. A
// read error of r is returned wrapped by wrap.
func ReadSized(r io.Reader, size int64, mismatch Mismatch, wrap func(error) error) ([]byte, error) {
	if size < 0 {
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, wrap(err)
		}
		return b, nil
	}
	limit := size + 1
	if limit < 0 { // size is math.MaxInt64
		limit = size
	}
	var buf bytes.Buffer
	buf.Grow(int(min(limit, 1<<20)))
	if _, err := buf.ReadFrom(io.LimitReader(r, limit)); err != nil {
		return nil, wrap(err)
	}
	if n := int64(buf.Len()); n != size {
		return nil, mismatch(size, n)
	}
	return buf.Bytes(), nil
}
