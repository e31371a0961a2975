package repository

import (
	"strconv"

	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/codes"
)

// What a model reference may look like: checked (CheckName, VersionNumber) before a name or
// version touches the file system or a number parser, on every call that takes one.
//
// A model name is one directory name of the repository layout: 1 to MaxNameBytes (NAME_MAX,
// the longest file name the file system takes) ASCII letters, digits, '_', '-', '.', not
// starting with '.' (no hidden directories, no '.' / '..'). A version is the canonical
// decimal name of a version directory: no sign, no leading zero, ASCII digits only, at most
// MaxVersionDigits digits.
const (
	MaxNameBytes     = 255
	MaxVersionDigits = 19
	NameRule         = "1 to 255 of the characters A-Z a-z 0-9 _ - ., not starting with '.'"
	VersionRule      = "a decimal number of 1 to 19 digits without a leading zero, or empty for the latest"
)

// ValidName says whether name can be a model of the repository layout (NameRule).
func ValidName(name string) bool {
	if len(name) < 1 || len(name) > MaxNameBytes || name[0] == '.' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// validVersion says whether v is a canonical version directory name (VersionRule, not empty).
func validVersion(v string) bool {
	if len(v) < 1 || len(v) > MaxVersionDigits || v[0] < '1' || v[0] > '9' {
		return false
	}
	for i := 1; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// CheckName is nil when name can be a model of the repository; else NOT_FOUND saying why.
func CheckName(name string) error {
	if !ValidName(name) {
		return status.New(codes.NotFound, "unknown model "+status.PyRepr(status.Clip(name, false))+
			": not a valid model name ("+NameRule+")")
	}
	return nil
}

// VersionNumber is the number version names ("" = the latest: 0, latest true); NOT_FOUND
// (naming the model, the version and the rule) for anything that is no canonical version
// directory name.
func VersionNumber(name, version string) (uint64, bool, error) {
	if version == "" {
		return 0, true, nil
	}
	if !validVersion(version) {
		return 0, false, status.New(codes.NotFound, "model "+status.PyRepr(status.Clip(name, false))+" has no version "+
			status.PyRepr(status.Clip(version, false))+": not a valid model version ("+VersionRule+")")
	}
	n, err := strconv.ParseUint(version, 10, 64) // 19 digits always fit
	if err != nil {
		return 0, false, status.New(codes.NotFound, "model "+status.PyRepr(status.Clip(name, false))+" has no version "+
			status.PyRepr(version))
	}
	return n, false, nil
}

// versionDir is the version a directory name says (false: not a version directory).
func versionDir(name string) (uint64, bool) {
	if !validVersion(name) {
		return 0, false
	}
	n, err := strconv.ParseUint(name, 10, 64)
	return n, err == nil
}
