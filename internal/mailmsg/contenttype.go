package mailmsg

import (
	"mime"
	"strings"
)

// octetStream is the type of anything we cannot name.
const octetStream = "application/octet-stream"

// builtinTypes pins the common attachment types so ContentTypeFor does not
// depend on the host's /etc/mime.types. Keys are lower-case extensions.
var builtinTypes = map[string]string{
	".pdf":    "application/pdf",
	".png":    "image/png",
	".jpg":    "image/jpeg",
	".jpeg":   "image/jpeg",
	".jpe":    "image/jpeg",
	".gif":    "image/gif",
	".webp":   "image/webp",
	".svg":    "image/svg+xml",
	".bmp":    "image/bmp",
	".tif":    "image/tiff",
	".tiff":   "image/tiff",
	".ico":    "image/vnd.microsoft.icon",
	".heic":   "image/heic",
	".avif":   "image/avif",
	".csv":    "text/csv",
	".tsv":    "text/tab-separated-values",
	".txt":    "text/plain",
	".log":    "text/plain",
	".md":     "text/markdown",
	".htm":    "text/html",
	".html":   "text/html",
	".css":    "text/css",
	".xml":    "application/xml",
	".json":   "application/json",
	".ics":    "text/calendar",
	".vcf":    "text/vcard",
	".rtf":    "application/rtf",
	".zip":    "application/zip",
	".gz":     "application/gzip",
	".tgz":    "application/gzip",
	".tar":    "application/x-tar",
	".7z":     "application/x-7z-compressed",
	".rar":    "application/vnd.rar",
	".doc":    "application/msword",
	".docx":   "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
	".xls":    "application/vnd.ms-excel",
	".xlsx":   "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
	".ppt":    "application/vnd.ms-powerpoint",
	".pptx":   "application/vnd.openxmlformats-officedocument.presentationml.presentation",
	".odt":    "application/vnd.oasis.opendocument.text",
	".ods":    "application/vnd.oasis.opendocument.spreadsheet",
	".odp":    "application/vnd.oasis.opendocument.presentation",
	".epub":   "application/epub+zip",
	".mp3":    "audio/mpeg",
	".wav":    "audio/wav",
	".ogg":    "audio/ogg",
	".m4a":    "audio/mp4",
	".mp4":    "video/mp4",
	".mov":    "video/quicktime",
	".webm":   "video/webm",
	".pkpass": "application/vnd.apple.pkpass",
	// message/rfc822 would be the natural type, but message/* parts may not
	// be base64-encoded (RFC 2046 5.2.1), and every attachment is.
	".eml": octetStream,
}

// ContentTypeFor guesses an attachment's MIME type from its file name's
// extension: the built-in table first, then mime.TypeByExtension, and
// application/octet-stream when neither knows it. It never returns a
// multipart/* or message/* type (those cannot be base64 attachments).
func ContentTypeFor(filename string) string {
	base := filename[strings.LastIndexAny(filename, `/\`)+1:]
	dot := strings.LastIndexByte(base, '.')
	if dot < 0 || dot == len(base)-1 {
		return octetStream
	}
	ext := strings.ToLower(base[dot:])
	if t, ok := builtinTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		if mt, _, err := mime.ParseMediaType(t); err == nil && attachableType(mt) {
			return t
		}
	}
	return octetStream
}

// attachableType reports whether a (lower-case) media type may be used for
// a base64-encoded leaf part.
func attachableType(mt string) bool {
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || !isToken(typ) || !isToken(sub) {
		return false
	}
	return typ != "multipart" && typ != "message"
}
