package omldm;

import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

/**
 * Routes the spokes' message stream (user requests and the {@code psMessages} feedback
 * topic) to spoke keys, in the JVM, so that a hub's answer does not cross into Python and
 * back on its way to the spoke.
 *
 * <p>Input: the raw bytes of one Kafka record. Output: {@code Row(k INT, v BYTES)}, the
 * same bytes with the key of the spoke they go to. By the first byte
 * ({@code middleware.codec.wire_kind}):
 * <ul>
 *   <li>{@code 0xFE}, a hub frame ({@code <BqqIiHHq}, 37 bytes or more): to the spoke index
 *       at byte 27 (uint16, little-endian);</li>
 *   <li>{@code 0xFC}, a sibling frame ({@code <BBqqQiHHqqQ}, 58 bytes or more): to the spoke
 *       index at byte 32;</li>
 *   <li>{@code 0xFF}, a bare envelope ({@code <BBIBHBHQQBHI}, 35 bytes or more): to its
 *       destination index at byte 10;</li>
 *   <li>anything else (a JSON request, garbage, an empty record): to every spoke key.</li>
 * </ul>
 * A frame or envelope too short for its header, or with an index outside the spokes, goes
 * to spoke 0's key, whose kernel counts and answers it. This is exactly what
 * {@code flink_jobs.job._ToSpokes} (Python, used when records are not batched) does.
 */
public class ToSpokes implements FlatMapFunction<byte[], Row> {

    private static final long serialVersionUID = 1L;

    private static final int FRAME_MAGIC = 0xFE;
    private static final int SIBLING_MAGIC = 0xFC;
    private static final int ENVELOPE_MAGIC = 0xFF;

    /** spokeKeys[i]: spoke i's key (its subtask: operators.routing.spoke_keys). */
    private final int[] spokeKeys;

    public ToSpokes(int[] spokeKeys) {
        this.spokeKeys = spokeKeys.clone();
    }

    /** The uint16 at {@code offset}, little-endian, or -1 when {@code data} is shorter than
     * {@code size}. */
    private static int index(byte[] data, int size, int offset) {
        if (data.length < size) {
            return -1;
        }
        return (data[offset] & 0xFF) | ((data[offset + 1] & 0xFF) << 8);
    }

    @Override
    public void flatMap(byte[] data, Collector<Row> out) {
        int first = data.length > 0 ? data[0] & 0xFF : 0;
        int dst;
        if (first == FRAME_MAGIC) {
            dst = index(data, 37, 27);
        } else if (first == SIBLING_MAGIC) {
            dst = index(data, 58, 32);
        } else if (first == ENVELOPE_MAGIC) {
            dst = Math.max(index(data, 35, 10), 0);  // an unreadable envelope: spoke 0
        } else {
            for (int key : spokeKeys) {
                out.collect(Row.of(key, data));
            }
            return;
        }
        out.collect(Row.of(spokeKeys[dst >= 0 && dst < spokeKeys.length ? dst : 0], data));
    }
}
