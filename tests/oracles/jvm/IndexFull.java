import java.io.File;
import java.nio.file.Files;

import org.apache.kafka.storage.internals.log.OffsetIndex;
import org.apache.kafka.storage.internals.log.TimeIndex;

/**
 * Kafka's own index-full rule: for each segment.index.bytes given, fill a fresh OffsetIndex and TimeIndex
 * with live appends until isFull() and print "bytes maxOffsetEntries offsetEntriesWhenFull maxTimeEntries
 * timeEntriesWhenFull timeEntriesAfterFinal", the final entry appended past the check (skipFullCheck).
 */
public class IndexFull {
    public static void main(String[] args) throws Exception {
        File dir = Files.createTempDirectory("index-full").toFile();
        for (String arg : args) {
            int bytes = Integer.parseInt(arg);
            File offsetFile = new File(dir, bytes + ".index");
            File timeFile = new File(dir, bytes + ".timeindex");
            OffsetIndex offsets = new OffsetIndex(offsetFile, 0L, bytes);
            long offset = 0;
            while (!offsets.isFull()) {
                offset++;
                offsets.append(offset, (int) offset);
            }
            TimeIndex times = new TimeIndex(timeFile, 0L, bytes);
            long ts = 0;
            while (!times.isFull()) {
                ts++;
                times.maybeAppend(ts, ts);
            }
            int live = times.entries();
            times.maybeAppend(ts + 1, ts + 1, true);
            System.out.println(bytes + " " + offsets.maxEntries() + " " + offsets.entries() + " " + times.maxEntries()
                    + " " + live + " " + times.entries());
            offsets.close();
            times.close();
            offsets.deleteIfExists();
            times.deleteIfExists();
        }
        dir.delete();
    }
}
