package redisguard

import (
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

// hashTag returns the part of key Redis Cluster hashes: the text between
// the first '{' and the first '}' after it when that text is not empty,
// and ok false otherwise (the whole key is hashed).
func hashTag(key string) (tag string, ok bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return key[i+1 : i+1+j], true
}

// markKey returns the key of resource's mark, which hashes to the same
// cluster slot as the value key (the resource itself): the mark key's hash
// tag is the resource's own tag, or the whole resource when it has none.
//
//	"doc:1"           -> <prefix>{doc:1}
//	"user:{42}:state" -> <prefix>{42}user:{42}:state
func (g *Guard) markKey(resource string) string {
	if tag, ok := hashTag(resource); ok {
		return g.prefix + "{" + tag + "}" + resource
	}
	return g.prefix + "{" + resource + "}"
}

// idsKey is the key of resource's write-id record (see writeScript): the
// mark key with "w" after the prefix, so in the same slot, and never equal
// to a mark key (those continue the prefix with '{') nor to a resource
// (those never start with the prefix).
//
//	"doc:1" -> <prefix>w{doc:1}
func (g *Guard) idsKey(resource string) string {
	return g.prefix + "w" + g.markKey(resource)[len(g.prefix):]
}

// checkResource applies fence.ValidateResource and the rules of this
// guard's keys: a resource without a hash tag must not contain '}' (its
// mark key's tag would end early and land in another slot), and no
// resource may start with the mark prefix (it would alias a mark); a
// *fence.ResourceError otherwise.
func (g *Guard) checkResource(resource string) error {
	if err := fence.ValidateResource(resource); err != nil {
		return err
	}
	if _, ok := hashTag(resource); !ok && strings.IndexByte(resource, '}') >= 0 {
		return &fence.ResourceError{Resource: resource, Reason: "contains '}' outside a non-empty {hash tag}"}
	}
	if strings.HasPrefix(resource, g.prefix) {
		return &fence.ResourceError{Resource: resource, Reason: fmt.Sprintf("starts with the mark prefix %q", g.prefix)}
	}
	return nil
}
