set -u
cd . && source .venv/bin/activate
export OMP_NUM_THREADS=1
for id in 11148 13484; do
  B=COPY_$id; rm -rf $B; cp -r BUNDLE_COPY $B
  case $id in 11148) P="Maurice Quentin de La Tour worked in the city of";; 13484) P="Riiser-Larsen Ice Shelf belongs to the continent of";; esac
  echo "== $id before:"; mobiedit --quiet run $B --no-chat --max-new-tokens 6 --prompt "$P" 2>/dev/null | tail -2
  /usr/bin/time -f "edit wall %e s" mobiedit --quiet edit --bundle $B --requests REQ_$id.json 2>&1 | grep -v "Warning\|W1207\|Failed to load" | tail -4
  echo "== $id after:"; mobiedit --quiet run $B --no-chat --max-new-tokens 6 --prompt "$P" 2>/dev/null | tail -2
done
